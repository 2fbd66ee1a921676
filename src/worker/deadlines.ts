// Job timeouts: one timer for all running jobs that have the same timeout, not one timer each.
// A job's own setTimeout was ~10 % of the worker's CPU per no-op job in figure 1 of issue 6 (a
// Timeout object, its async resource passed through AsyncLocalStorage's hooks, its insert into
// and removal from Node's timer list). Jobs with one timeout start in order, so their deadlines
// come in order too: each timeout has a queue, and its one timer waits for the queue's head.

/** A pending deadline, to hand back to cancel(). */
export interface Deadline {
  readonly at: number;
}

class Entry implements Deadline {
  constructor(
    readonly at: number,
    public fire: (() => void) | null,
    readonly lane: Lane,
  ) {}
}

/** The deadlines of one timeout, in order; cancelled entries stay until they reach the head. */
class Lane {
  entries: Entry[] = [];
  head = 0;
  live = 0;
  timer: NodeJS.Timeout | undefined;
}

/**
 * Cancelled entries kept behind a live head (a long job ahead of many short ones) are dropped
 * once the queue holds more than twice its live ones and this many: it stays within about twice
 * the running jobs.
 */
const COMPACT_SLACK = 64;

export class Deadlines {
  private readonly lanes = new Map<number, Lane>();

  /**
   * Call `fire` once `ms` have passed since `from` (performance.now(); now when absent), unless
   * cancel() comes first. It runs from a timer callback, never inside add() or cancel(). Deadlines
   * of one `ms` are expected in the order of their `from`, as jobs start: one added out of order
   * would wait for those ahead of it.
   */
  add(ms: number, fire: () => void, from?: number): Deadline {
    let lane = this.lanes.get(ms);
    if (!lane) this.lanes.set(ms, (lane = new Lane()));
    const entry = new Entry((from ?? performance.now()) + ms, fire, lane);
    lane.entries.push(entry);
    // The lane's only entry: its timer waits for it. (Otherwise the timer waits for an earlier
    // head, or expire() is running and arms it for the head once it is done.)
    if (++lane.live === 1 && !lane.timer) this.arm(lane, from === undefined ? ms : entry.at - performance.now());
    return entry;
  }

  /** The deadline will not fire (a no-op once it has fired or was cancelled). */
  cancel(deadline: Deadline): void {
    const entry = deadline as Entry;
    if (entry.fire === null) return;
    entry.fire = null;
    const lane = entry.lane;
    if (--lane.live === 0) {
      this.empty(lane);
      return;
    }
    // The timer still waits for the old head: firing early only re-arms it, which is cheaper than
    // re-arming at every completion.
    const { entries } = lane;
    while (entries[lane.head]!.fire === null) lane.head++;
    if (entries.length - lane.head > 2 * lane.live + COMPACT_SLACK) {
      lane.entries = entries.slice(lane.head).filter((e) => e.fire !== null);
      lane.head = 0;
    } else if (lane.head > COMPACT_SLACK && lane.head * 2 > entries.length) {
      lane.entries = entries.slice(lane.head);
      lane.head = 0;
    }
  }

  /** Deadlines not yet fired or cancelled (for tests). */
  get pending(): number {
    let n = 0;
    for (const lane of this.lanes.values()) n += lane.live;
    return n;
  }

  /** Entries the queues hold, cancelled ones not yet dropped included (for tests). */
  get held(): number {
    let n = 0;
    for (const lane of this.lanes.values()) n += lane.entries.length - lane.head;
    return n;
  }

  private arm(lane: Lane, delayMs: number): void {
    // A timer may come back a little before performance.now() reaches its deadline (libuv counts
    // from its cached loop time): expire() then arms it again for what is left, at least 1 ms.
    lane.timer = setTimeout(() => this.expire(lane), Math.max(1, Math.ceil(delayMs)));
  }

  private expire(lane: Lane): void {
    lane.timer = undefined;
    const now = performance.now();
    const due: (() => void)[] = [];
    while (lane.head < lane.entries.length) {
      const entry = lane.entries[lane.head]!;
      if (entry.fire !== null) {
        if (entry.at > now) break;
        due.push(entry.fire);
        entry.fire = null;
        lane.live--;
      }
      lane.head++;
    }
    // The lane is in order before any deadline fires: one that adds or cancels another finds it so.
    if (lane.live === 0) this.empty(lane);
    else this.arm(lane, lane.entries[lane.head]!.at - now);
    for (const fire of due) {
      try {
        fire();
      } catch (err) {
        // As a throw from a timer of its own would: uncaught, once the others have fired too.
        setImmediate(() => {
          throw err;
        });
      }
    }
  }

  private empty(lane: Lane): void {
    clearTimeout(lane.timer);
    lane.timer = undefined;
    lane.entries = [];
    lane.head = 0;
  }
}
