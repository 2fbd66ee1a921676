// The in-process handler channel: call the user's function with its context; with
// `transactional`, inside one transaction with the consume record and the job's completion.
import type { Clock } from '../../core/clock.js';
import type { Logger } from '../../core/logger.js';
import type { ClaimedJob, Driver } from '../../driver/types.js';
import { makeTransaction } from '../../tx/rea.js';
import type { HandlerContext, RegisteredHandler } from '../../worker/registry.js';

export type HandlerOutcome = 'succeeded' | 'committed' | 'already-consumed';

/** Settles as soon as `signal` aborts, even if the handler ignores it. */
export function abortable<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}

export async function runHandler(
  driver: Driver,
  handler: RegisteredHandler,
  job: ClaimedJob,
  signal: AbortSignal,
  log: Logger,
  clock: Clock,
): Promise<HandlerOutcome> {
  const base: Omit<HandlerContext, 'tx'> = {
    signal,
    attempt: job.attempt,
    maxAttempts: job.maxAttempts,
    idempotencyKey: `${job.event.id}:${handler.name}`,
    jobId: job.id,
    coalesced: job.coalesced,
    log,
  };
  // Called through an async wrapper so a synchronous throw becomes a rejection like any other.
  const call = async (ctx: HandlerContext) => handler.fn(job.event, ctx);

  if (!handler.transactional) {
    await abortable(call(base), signal);
    return 'succeeded';
  }
  return driver.transaction(async (q, raw) => {
    const fresh = await driver.executor.consumeInsert(q, { eventId: job.event.id, handler: handler.name });
    if (fresh) {
      const state = { open: true };
      try {
        await abortable(call({ ...base, tx: makeTransaction(q, raw, state) }), signal);
      } finally {
        state.open = false;
      }
    }
    await driver.executor.jobCompleteMany(q, { jobs: [{ id: job.id, attempt: job.attempt }], now: clock.now() });
    return fresh ? 'committed' : 'already-consumed';
  });
}
