/**
 * Linux network namespaces for partition tests: each "host" is a namespace of its own, joined to the
 * root namespace by a veth pair with a /30 of its own (10.77.<net>.<4i+1> on the root side, .<4i+2>
 * inside). The stores keep listening on 127.0.0.1 in the root namespace, untouched: for each host and
 * each service the lab listens on the host's root-side address and forwards every connection to the
 * service's loopback port (or to a fault proxy in front of it, `startTcpProxy`). A process spawned
 * in the host (`ip netns exec`) reaches the stores only across its veth, so setting that link down
 * is a real partition: packets vanish, connections stay open, TCP retransmits when the link comes
 * back up.
 *
 * ```ts
 * const support = netnsSupport();
 * if (!support.ok) return;                         // not root, or `ip netns` refused: support.reason
 * const lab = await createLab({ hosts: 2, services: { redis: 6379 } });
 * const child = lab.hosts[0].spawn(process.execPath, ["worker.mjs", `${lab.hosts[0].address("redis")}`]);
 * lab.hosts[0].cut();                              // ip link set <veth> down
 * lab.hosts[0].heal();                             // ip link set <veth> up
 * await lab.close();                               // SIGKILLs what it spawned, deletes veths and namespaces
 * ```
 *
 * Names are unique per lab (`oncely-p-<pid>-<random>-<host>`, veths `op<pid><random><host>r|h`), and
 * a lab whose test process exits without `close()` is still deleted by an exit hook.
 */
import { type ChildProcess, execFileSync, type SpawnOptions, spawn } from "node:child_process";
import { randomBytes, randomInt } from "node:crypto";
import { createServer, type Server, type Socket, connect as tcpConnect } from "node:net";

/** Whether this process can build namespaces, and if not, why (the reason a skipped test names). */
export type NetnsSupport = { readonly ok: true } | { readonly ok: false; readonly reason: string };

function ip(args: readonly string[]): string {
  return execFileSync("ip", args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], timeout: 10_000 });
}

let support: NetnsSupport | undefined;

/** Probes once per process: root, the `ip` tool, and a namespace that can be added and deleted. */
export function netnsSupport(): NetnsSupport {
  support ??= probeNetns();
  return support;
}

function probeNetns(): NetnsSupport {
  if (process.platform !== "linux") return { ok: false, reason: "network namespaces need Linux" };
  if (process.getuid?.() !== 0) return { ok: false, reason: "network namespaces need root" };
  const probe = `oncely-probe-${process.pid}`;
  try {
    ip(["netns", "add", probe]);
    ip(["netns", "exec", probe, "ip", "link", "set", "lo", "up"]);
    return { ok: true };
  } catch (error) {
    const detail = (error as { stderr?: string }).stderr?.trim() || String(error);
    return { ok: false, reason: `\`ip netns\` failed: ${detail}` };
  } finally {
    try {
      ip(["netns", "del", probe]);
    } catch {
      // it was never made
    }
  }
}

/** A namespace with its link to the root namespace. */
export interface Host {
  readonly index: number;
  /** The namespace's name (`ip netns exec <namespace> …`). */
  readonly namespace: string;
  /** The root side of the veth pair (the end `cut()` sets down by default). */
  readonly rootLink: string;
  /** The namespace side of the veth pair. */
  readonly hostLink: string;
  /** The root side's address: where the host reaches the services. */
  readonly gateway: string;
  /** The host's own address. */
  readonly ownAddress: string;
  /** Where, seen from inside the host, `service` listens (`10.77.x.1:<port>`). */
  address(service: string): { readonly host: string; readonly port: number };
  /** Whether the link is down now. */
  readonly isCut: boolean;
  /** Sets the link down: on the root side (the default) or inside the namespace. */
  cut(end?: "root" | "host"): void;
  /** Sets both ends up again. */
  heal(): void;
  /** Bytes received from this host by the forwarders (all services), and when the last arrived. */
  readonly received: { readonly bytes: number; readonly lastAt: number };
  /**
   * When bytes from the host reached a forwarder again after the last `heal()` (0 while none has):
   * TCP retransmits on its own backoff, so a connection may stay silent for a while after the link
   * is up, then deliver what was queued during the partition in one burst.
   */
  readonly resumedAt: number;
  /** Spawns `command` inside the namespace; the lab SIGKILLs it on `close()` if it still runs. */
  spawn(command: string, args: readonly string[], options?: SpawnOptions): ChildProcess;
}

export interface LabOptions {
  /** How many hosts (namespaces). */
  readonly hosts: number;
  /**
   * The services the hosts reach, by name: the loopback port every host's connections go to, or a
   * function giving each host its own (a fault proxy per host).
   */
  readonly services: Readonly<Record<string, number | ((host: number) => number)>>;
}

export interface Lab {
  readonly hosts: readonly Host[];
  /** SIGKILLs the children still running, closes the forwarders, deletes every veth and namespace. */
  close(): Promise<void>;
}

const cleanups = new Set<() => void>();
let exitHook = false;

function hookExit(): void {
  if (exitHook) return;
  exitHook = true;
  process.once("exit", () => {
    for (const cleanup of cleanups) cleanup();
  });
}

/** The third octet of a 10.77.x.0/24 no interface on this machine uses yet. */
function freeNet(): number {
  const used = ip(["-o", "-4", "addr", "show"]);
  const start = randomInt(250);
  for (let i = 0; i < 250; i++) {
    const net = ((start + i) % 250) + 1;
    if (!used.includes(` 10.77.${net}.`)) return net;
  }
  throw new Error("no free 10.77.x.0/24 network for the lab");
}

/** Builds the namespaces and links, and starts the forwarders. Deletes what it made if a step fails. */
export async function createLab(options: LabOptions): Promise<Lab> {
  if (options.hosts < 1 || options.hosts > 60) throw new Error("a lab has 1 to 60 hosts");
  const run = randomBytes(2).toString("hex"); // unique across labs of one process, and its threads
  const net = freeNet();
  const made: { namespace: string; rootLink: string }[] = [];
  const children = new Set<ChildProcess>();
  const servers: Server[] = [];
  const sockets = new Set<Socket>();
  const cleanup = () => {
    for (const child of children)
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    for (const { namespace, rootLink } of made) {
      try {
        ip(["link", "del", rootLink]);
      } catch {
        // deleted with its namespace already
      }
      try {
        ip(["netns", "del", namespace]);
      } catch {
        // already gone
      }
    }
    made.length = 0;
  };
  cleanups.add(cleanup);
  hookExit();

  const hosts: Host[] = [];
  try {
    for (let i = 0; i < options.hosts; i++) {
      const namespace = `oncely-p-${process.pid}-${run}-${i}`;
      const rootLink = `op${process.pid % 100_000}${run}${i}r`; // at most 15 characters
      const hostLink = `op${process.pid % 100_000}${run}${i}h`;
      const gateway = `10.77.${net}.${4 * i + 1}`;
      const ownAddress = `10.77.${net}.${4 * i + 2}`;
      ip(["netns", "add", namespace]);
      made.push({ namespace, rootLink });
      ip(["link", "add", rootLink, "type", "veth", "peer", "name", hostLink]);
      ip(["link", "set", hostLink, "netns", namespace]);
      ip(["addr", "add", `${gateway}/30`, "dev", rootLink]);
      ip(["link", "set", rootLink, "up"]);
      const inside = (args: string[]) => ip(["netns", "exec", namespace, "ip", ...args]);
      inside(["addr", "add", `${ownAddress}/30`, "dev", hostLink]);
      inside(["link", "set", hostLink, "up"]);
      inside(["link", "set", "lo", "up"]);

      const received = { bytes: 0, lastAt: 0, healedAt: 0, resumedAt: 0 };
      const ports = new Map<string, number>();
      for (const [service, upstream] of Object.entries(options.services)) {
        const target = typeof upstream === "function" ? upstream(i) : upstream;
        const server = createServer((client) => forward(client, target, received, sockets));
        await new Promise<void>((resolve, reject) => {
          server.once("error", reject);
          server.listen(0, gateway, () => resolve());
        });
        servers.push(server);
        const address = server.address();
        if (address === null || typeof address === "string") throw new Error("forwarder has no port");
        ports.set(service, address.port);
      }
      let cut = false;
      hosts.push({
        index: i,
        namespace,
        rootLink,
        hostLink,
        gateway,
        ownAddress,
        address(service) {
          const port = ports.get(service);
          if (port === undefined) throw new Error(`the lab has no service ${service}`);
          return { host: gateway, port };
        },
        get isCut() {
          return cut;
        },
        cut(end = "root") {
          if (end === "root") ip(["link", "set", rootLink, "down"]);
          else inside(["link", "set", hostLink, "down"]);
          cut = true;
        },
        heal() {
          ip(["link", "set", rootLink, "up"]);
          inside(["link", "set", hostLink, "up"]);
          cut = false;
          received.healedAt = Date.now();
          received.resumedAt = 0;
        },
        get received() {
          return { bytes: received.bytes, lastAt: received.lastAt };
        },
        get resumedAt() {
          return received.resumedAt;
        },
        spawn(command, args, spawnOptions = {}) {
          const child = spawn("ip", ["netns", "exec", namespace, command, ...args], spawnOptions);
          children.add(child);
          child.once("exit", () => children.delete(child));
          return child;
        },
      });
    }
  } catch (error) {
    for (const server of servers) server.close();
    cleanup();
    cleanups.delete(cleanup);
    throw error;
  }

  return {
    hosts,
    async close() {
      for (const socket of sockets) socket.destroy();
      await Promise.all(
        servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve()))),
      );
      cleanup();
      cleanups.delete(cleanup);
    },
  };
}

/** Pipes one host connection to the service on loopback, both ways; either side closing closes both. */
function forward(
  client: Socket,
  port: number,
  received: { bytes: number; lastAt: number; healedAt: number; resumedAt: number },
  sockets: Set<Socket>,
): void {
  const upstream = tcpConnect({ host: "127.0.0.1", port });
  client.on("data", (chunk: Buffer) => {
    const now = Date.now();
    received.bytes += chunk.length;
    received.lastAt = now;
    if (received.healedAt > 0 && received.resumedAt === 0) received.resumedAt = now;
  });
  client.pipe(upstream).pipe(client);
  for (const socket of [client, upstream]) {
    sockets.add(socket);
    socket.setNoDelay(true);
    socket.on("error", () => socket.destroy()); // "close" follows
    socket.once("close", () => {
      sockets.delete(socket);
      client.destroy();
      upstream.destroy();
    });
  }
}
