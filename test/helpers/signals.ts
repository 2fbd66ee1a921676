// Small signalling helpers so tests wait on events, never on sleeps.

export function deferred<T = void>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Resolves once `count` calls of the returned tick() have happened. */
export function counter(count: number) {
  let n = 0;
  const d = deferred<void>();
  return {
    tick: () => {
      n++;
      if (n === count) d.resolve();
    },
    get value() {
      return n;
    },
    done: d.promise,
  };
}
