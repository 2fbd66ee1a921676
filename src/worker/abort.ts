// A job's abort: its timeout or the worker's stop. Most handlers never look at their signal, so
// the AbortSignal (an EventTarget, the costliest object of a job's run) is made only when asked for.
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

  /** Settles like `work`, or rejects with the reason as soon as abort() is called, even if the work ignores it. */
  race<T>(work: Promise<T>): Promise<T> {
    if (this.aborted) return Promise.reject(this.reason);
    return new Promise<T>((resolve, reject) => {
      this.rejectRace = reject;
      // Once settled, a later abort has nothing to reject: drop the reference (and what it holds).
      const settle = (): void => {
        this.rejectRace = undefined;
      };
      work.then(
        (value) => {
          settle();
          resolve(value);
        },
        (err: unknown) => {
          settle();
          reject(err);
        },
      );
    });
  }
}
