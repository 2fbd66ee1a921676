// "Now" is injectable: services and SQL take a clock so tests move time instead of sleeping.

export interface Clock {
  /** The current time, or null to let the database use its own clock. */
  now(): Date | null;
}

export const databaseClock: Clock = { now: () => null };

/** A clock tests set and advance by hand. */
export class ManualClock implements Clock {
  private t: number;
  constructor(start: Date | number = Date.now()) {
    this.t = typeof start === 'number' ? start : start.getTime();
  }
  now(): Date {
    return new Date(this.t);
  }
  set(at: Date | number): void {
    this.t = typeof at === 'number' ? at : at.getTime();
  }
  advance(ms: number): void {
    this.t += ms;
  }
}

/** Wall time for computations made in the app (backoff), following an injected clock when set. */
export function appNow(clock: Clock): number {
  return clock.now()?.getTime() ?? Date.now();
}
