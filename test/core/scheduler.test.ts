/**
 * The shared timer queues (`scheduler.ts`): an event that falls due runs when it falls due, also when
 * the events run just before it add events of their own to the same queue (a heartbeat's renewal
 * adds its store call's deadline): the queue's timer is then armed for the earliest event left.
 */
import { describe, expect, it } from "vitest";
import { ManualClock } from "../../src/core/clock.js";
import { Callback, cancel, schedule, scheduleAt } from "../../src/core/scheduler.js";

describe("scheduler", () => {
  it("an event added while the queue fires does not hold back the events already waiting", async () => {
    const clock = new ManualClock();
    const start = clock.now();
    const ran: Array<[string, number]> = [];
    const log = (name: string) => () => ran.push([name, clock.now() - start]);
    schedule(
      clock,
      100,
      new Callback(() => {
        log("a")();
        schedule(clock, 100, new Callback(log("c")));
      }),
    );
    await clock.advance(10);
    schedule(clock, 100, new Callback(log("b")));
    await clock.advance(105);
    expect(ran).toEqual([
      ["a", 100],
      ["b", 110],
    ]);
    await clock.advance(100);
    expect(ran.at(-1)).toEqual(["c", 200]);
  });

  it("scheduleAt: events for one instant run together, once; a cancelled one never runs", async () => {
    const clock = new ManualClock();
    const at = clock.now() + 50;
    const ran: string[] = [];
    scheduleAt(clock, at, new Callback(() => ran.push("a")));
    await clock.advance(20);
    const b = scheduleAt(clock, at, new Callback(() => ran.push("b")));
    scheduleAt(clock, at, new Callback(() => ran.push("c")));
    cancel(b);
    await clock.advance(29);
    expect(ran).toEqual([]);
    await clock.advance(1);
    expect(ran).toEqual(["a", "c"]);
    // what an event of that instant schedules for the same instant (now past) runs 1 ms later
    scheduleAt(clock, at, new Callback(() => ran.push("d")));
    await clock.advance(1);
    expect(ran).toEqual(["a", "c", "d"]);
    await clock.advance(100);
    expect(ran).toEqual(["a", "c", "d"]);
  });
});
