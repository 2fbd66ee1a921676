// The skeleton every maintenance service shares: a runOnce() that works in bounded batches, run
// every intervalMs while this process leads; start() and stop() may be called twice.
import { errorMessage } from '../core/errors-format.js';
import type { Logger } from '../core/logger.js';
import { MAX_TIMER_MS } from '../core/options.js';

export interface MaintenanceService {
  readonly name: string;
  readonly intervalMs: number;
  runOnce(): Promise<unknown>;
}

/**
 * Runs passes one at a time. The housekeeping services of a process (retention rules, vacuum,
 * endpoint health, attempt retention) share one: each pass holds a pool connection, and all of
 * them starting together when this process becomes leader took seven connections at once from
 * the pool the relay and the workers use (an idle bus opened ten, a forked backend each).
 */
export class MaintenanceLane {
  private tail: Promise<unknown> = Promise.resolve();

  /** Runs fn once every pass queued before it has ended. */
  run<T>(fn: () => Promise<T>): Promise<T> {
    const pass = this.tail.then(fn);
    this.tail = pass.catch(() => undefined);
    return pass;
  }
}

export class ServiceRunner {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<unknown> | undefined;
  /**
   * Settles (never rejects) when the pass that has started its work ends; a pass still queued in
   * the lane is not one. A failed pass is logged by its chain: stop() only waits for it. Losing
   * leadership calls stop() without awaiting it, so a rejection here would end the process (a
   * PostgreSQL restart did: the rescuer's pass failed as the election did).
   */
  private working: Promise<void> | undefined;
  private started = false;
  // Bumped by every start() and stop(): a timer or pass of an earlier start sees it changed and
  // stops its chain, so leadership lost and regained during a pass never leaves two chains.
  private generation = 0;

  /** lane: shared with other services so that their passes never overlap; none: passes run on their own. */
  constructor(private readonly service: MaintenanceService, private readonly log: Logger, private readonly lane?: MaintenanceLane) {}

  start(): void {
    if (this.started) return;
    this.started = true;
    this.schedule(0, ++this.generation);
  }

  /**
   * Stops the chain and waits for a pass at work, at most `waitMs` (a pass stuck on a lock is left
   * to end on its own). A pass still queued in the lane behind another service's is not waited
   * for: when its turn comes it sees the chain stopped and does nothing.
   */
  async stop(waitMs = Infinity): Promise<void> {
    this.started = false;
    this.generation++;
    clearTimeout(this.timer);
    this.timer = undefined;
    const working = this.working;
    if (!working) return;
    if (waitMs === Infinity) return void (await working);
    let timer: NodeJS.Timeout | undefined;
    const waited = await Promise.race([working.then(() => true), new Promise<false>((r) => (timer = setTimeout(() => r(false), waitMs)))]);
    clearTimeout(timer);
    if (!waited) this.log.warn({ service: this.service.name, waited_ms: waitMs }, 'maintenance pass still running at stop; not waiting for it');
  }

  private schedule(ms: number, generation: number): void {
    // Node runs a timer longer than MAX_TIMER_MS after 1 ms instead (with a warning): an interval
    // of a month would have run its pass back to back. Wait in steps that Node keeps.
    if (ms > MAX_TIMER_MS) {
      this.timer = setTimeout(() => {
        if (generation === this.generation) this.schedule(ms - MAX_TIMER_MS, generation);
      }, MAX_TIMER_MS);
      this.timer.unref?.();
      return;
    }
    this.timer = setTimeout(async () => {
      // A pass of an earlier start may still be in flight: never run two at once.
      if (this.running) await this.running;
      if (generation !== this.generation) return;
      // Queued in a lane behind another service's pass, it may be stopped before its turn.
      const runOnce = () => {
        if (generation !== this.generation) return Promise.resolve();
        const work = this.service.runOnce();
        const clear = () => {
          if (this.working === working) this.working = undefined;
        };
        const working: Promise<void> = work.then(clear, clear);
        this.working = working;
        return work;
      };
      const pass = (this.lane ? this.lane.run(runOnce) : runOnce())
        .catch((err) => this.log.warn({ err: errorMessage(err), service: this.service.name }, 'maintenance pass failed'));
      this.running = pass;
      await pass;
      if (this.running === pass) this.running = undefined;
      if (generation === this.generation) this.schedule(this.service.intervalMs, generation);
    }, ms);
    this.timer.unref?.();
  }
}
