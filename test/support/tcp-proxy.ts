/**
 * A loopback TCP proxy for fault injection: sits between a client and a real server (Redis,
 * PostgreSQL, an emulator) and can, at any moment, stop forwarding (the connection goes silent: no
 * FIN, no RST, bytes vanish), drop only the server's answers (the request reaches the store and
 * commits, the reply is lost), reset every open connection, or hold every chunk for a while (a slow
 * link: `delayMs` in each direction, order kept per connection).
 *
 * ```ts
 * const proxy = await startTcpProxy({ port: 6379 });
 * const client = new Redis(proxy.port);
 * proxy.mode = "silent";        // every byte from now on is swallowed, both ways
 * proxy.mode = "drop-replies";  // requests reach the server, replies are swallowed
 * proxy.mode = "forward";       // back to normal for new bytes (swallowed ones stay lost)
 * proxy.reset();                // RST every open connection
 * proxy.delayMs = 500;          // each chunk from now on waits 500 ms, each way, then goes on in order
 * await proxy.close();
 * ```
 *
 * Bytes swallowed are gone for good, like on a real network that lost them; a client that then
 * sends again on the same connection sees the protocol out of step only if it was mid-reply, which
 * is exactly the fault such tests want. New connections made while `silent` are accepted and
 * silent too.
 */
import { connect, createServer, type Server, type Socket } from "node:net";

export type ProxyMode = "forward" | "silent" | "drop-replies";

export interface TcpProxy {
  /** The proxy's own port on 127.0.0.1. */
  readonly port: number;
  /** What happens to bytes from now on. @default "forward" */
  mode: ProxyMode;
  /** Connections accepted so far. */
  readonly connections: number;
  /**
   * How long each chunk that arrives from now on is held before it is forwarded, in each direction
   * (so a round trip takes twice as long). Chunks leave in the order they came, per connection and
   * direction, so lowering it never lets a later chunk overtake a held one. Whether a chunk is
   * swallowed is decided when it arrives. @default 0
   */
  delayMs: number;
  /** Bytes swallowed so far (both directions). */
  readonly dropped: number;
  /** Destroys every open connection with a TCP RST (both sides). */
  reset(): void;
  /** Resolves once `predicate` holds for a chunk the client sent (forwarded or not). */
  waitForRequest(predicate: (chunk: Buffer) => boolean, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

export interface TcpProxyOptions {
  /** The real server's port. */
  readonly port: number;
  /** @default "127.0.0.1" */
  readonly host?: string;
}

/** Starts a proxy on a free loopback port in front of `host:port`. */
export async function startTcpProxy(options: TcpProxyOptions): Promise<TcpProxy> {
  const host = options.host ?? "127.0.0.1";
  const pairs = new Set<{ client: Socket; upstream: Socket }>();
  const watchers = new Set<(chunk: Buffer) => void>();
  let connections = 0;
  let dropped = 0;
  const state = { mode: "forward" as ProxyMode, delayMs: 0 };

  /** Writes chunks to `to` after `state.delayMs` (read per chunk), first in, first out. */
  const relay = (to: Socket) => {
    const queue: { due: number; chunk: Buffer }[] = [];
    let timer: NodeJS.Timeout | undefined;
    const drain = () => {
      timer = undefined;
      const now = Date.now();
      while (queue.length > 0 && (queue[0] as { due: number }).due <= now) {
        const { chunk } = queue.shift() as { chunk: Buffer };
        if (!to.destroyed) to.write(chunk);
      }
      if (queue.length > 0) timer = setTimeout(drain, (queue[0] as { due: number }).due - now);
    };
    return {
      write(chunk: Buffer) {
        if (state.delayMs <= 0 && queue.length === 0) {
          to.write(chunk);
          return;
        }
        queue.push({ due: Date.now() + state.delayMs, chunk });
        timer ??= setTimeout(drain, Math.max(0, (queue[0] as { due: number }).due - Date.now()));
      },
      stop() {
        clearTimeout(timer);
        queue.length = 0;
      },
    };
  };

  const server: Server = createServer((client) => {
    connections++;
    const upstream = connect({ host, port: options.port });
    const pair = { client, upstream };
    pairs.add(pair);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    const toUpstream = relay(upstream);
    const toClient = relay(client);
    client.on("data", (chunk: Buffer) => {
      for (const watch of watchers) watch(chunk);
      if (state.mode === "silent") dropped += chunk.length;
      else toUpstream.write(chunk);
    });
    upstream.on("data", (chunk: Buffer) => {
      if (state.mode === "forward") toClient.write(chunk);
      else dropped += chunk.length;
    });
    const end = () => {
      pairs.delete(pair);
      toUpstream.stop();
      toClient.stop();
      client.destroy();
      upstream.destroy();
    };
    client.on("error", end);
    upstream.on("error", end);
    client.on("close", end);
    upstream.on("close", end);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("proxy has no port");

  return {
    port: address.port,
    get mode() {
      return state.mode;
    },
    set mode(mode: ProxyMode) {
      state.mode = mode;
    },
    get delayMs() {
      return state.delayMs;
    },
    set delayMs(ms: number) {
      if (!Number.isFinite(ms) || ms < 0)
        throw new RangeError(`delayMs must be a finite number >= 0, got ${ms}`);
      state.delayMs = ms;
    },
    get connections() {
      return connections;
    },
    get dropped() {
      return dropped;
    },
    reset() {
      for (const { client, upstream } of pairs) {
        client.resetAndDestroy();
        upstream.resetAndDestroy();
      }
      pairs.clear();
    },
    waitForRequest(predicate, timeoutMs = 10_000) {
      return new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => {
          watchers.delete(watch);
          reject(new Error(`no matching request within ${timeoutMs} ms`));
        }, timeoutMs);
        const watch = (chunk: Buffer) => {
          if (!predicate(chunk)) return;
          clearTimeout(timer);
          watchers.delete(watch);
          resolve();
        };
        watchers.add(watch);
      });
    },
    async close() {
      for (const { client, upstream } of pairs) {
        client.destroy();
        upstream.destroy();
      }
      pairs.clear();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
