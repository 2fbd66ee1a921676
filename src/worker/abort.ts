// A job's abort: its timeout or the worker's stop. Most handlers never look at their signal, so
// the AbortSignal (an EventTarget, the costliest object of a job's run) is made only when asked for.

/** race()'s default: fulfil with the work's own value. */
const OWN: unique symbol = Symbol('own');

export class JobAbort {
  private controller: AbortController | undefined;
  private rejectRace: ((reason: unknown) => void) | undefined;
  aborted = false;
  reason: unknown = undefined;

  /** The signal to hand to code that takes one (fetch, the handler's ctx.signal). */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.aborted) this.controller.abort(this.reason);
    }
    return this.controller.signal;
  }

  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    this.controller?.abort(reason);
    this.rejectRace?.(reason);
  }

  /**
   * Settles like `work`, or rejects with the reason once abort() is called, even if the work
   * ignores it: at once, or `graceMs` after the abort, for work that stops on the signal itself
   * and then still has a short write to make (a webhook's attempt log).
   */
  race<T>(work: Promise<T>, graceMs?: number): Promise<T>;
  /** The same, fulfilled with `value` rather than the work's own (a promise fewer than a .then after it). */
  race<R>(work: Promise<unknown>, graceMs: number, value: R): Promise<R>;
  race(work: Promise<unknown>, graceMs = 0, value: unknown = OWN): Promise<unknown> {
    if (this.aborted && graceMs === 0) return Promise.reject(this.reason);
    return new Promise<unknown>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const cut = (reason: unknown): void => {
        if (graceMs === 0) return reject(reason);
        timer = setTimeout(() => reject(reason), graceMs);
        timer.unref();
      };
      if (this.aborted) cut(this.reason);
      else this.rejectRace = cut;
      // Once settled, a later abort has nothing to reject: drop the reference (and what it holds).
      const settle = (): void => {
        this.rejectRace = undefined;
        clearTimeout(timer);
      };
      work.then(
        (result) => {
          settle();
          resolve(value === OWN ? result : value);
        },
        (err: unknown) => {
          settle();
          reject(err);
        },
      );
    });
  }
}
