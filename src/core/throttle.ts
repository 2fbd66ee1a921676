// Wake-up throttling: at most one call per key per window. The first call after a quiet spell runs
// at once, so an isolated commit is heard without delay; calls inside the window after it become
// one call at the window's end, so a burst of commits costs two calls, not one per commit.

export interface Throttled {
  (key: string): void;
  /** Drop the calls waiting for their window's end. */
  cancel(): void;
}

export function throttled(windowMs: number, fn: (key: string) => void, now: () => number = () => performance.now()): Throttled {
  const lastRun = new Map<string, number>();
  const waiting = new Map<string, NodeJS.Timeout>();
  const run = (key: string) => {
    lastRun.set(key, now());
    fn(key);
  };
  const call = ((key: string) => {
    if (waiting.has(key)) return;
    const last = lastRun.get(key);
    const wait = last === undefined ? 0 : last + windowMs - now();
    if (wait <= 0) return run(key);
    const t = setTimeout(() => {
      waiting.delete(key);
      run(key);
    }, wait);
    t.unref?.();
    waiting.set(key, t);
  }) as Throttled;
  call.cancel = () => {
    for (const t of waiting.values()) clearTimeout(t);
    waiting.clear();
  };
  return call;
}
