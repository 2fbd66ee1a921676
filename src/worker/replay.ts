// events.replay(eventId, { handler }): a stored event sent again to one in-process handler, as a
// new job. For a handler added after the event (an unrouted event is a fact a later subscriber
// can replay), or one whose effect must be made again once its code is fixed.
import { BusStateError, InvalidFilterError, NotFoundError, OptionsError } from '../core/errors.js';
import { eventListParams, isUuid, rejectUnknownFilterKeys, type EventListFilter } from '../core/filters.js';
import { unstorableText } from '../core/json.js';
import type { Driver } from '../driver/types.js';

/**
 * A handler name given to a replay or a retry. One holding a NUL (or a lone surrogate) is no name a
 * bus could have stored, and PostgreSQL refuses it as a parameter, which came out as a 500.
 */
export function checkHandlerName(value: unknown, field: string): asserts value is string {
  if (typeof value !== 'string' || value === '') throw new OptionsError(field, 'must be a handler name');
  if (unstorableText(value)) throw new OptionsError(field, 'holds a NUL character (\\u0000) or a lone UTF-16 surrogate: no handler has such a name');
}

/** A handler name no bus registered, refused with the names that are (jobs.retry, events.replay). */
export async function unknownHandler(driver: Driver, name: unknown): Promise<NotFoundError> {
  const names = (await driver.operations.handlerSchedules()).map((h) => `'${h.name}'`);
  return new NotFoundError(`handler ${JSON.stringify(name)}`, `known handlers: ${names.length ? names.join(', ') : '(none registered)'}`);
}

/** What events.replay(eventId, { handler }) made: a new job of that handler for that event. */
export interface HandlerReplay {
  jobId: string;
  eventId: string;
  handler: string;
}

/**
 * A new job of `handler` for the stored event, due now. Refused by name when the event is missing,
 * not fanned out yet or poisoned (the relay delivers those), when no bus registered the handler or
 * it does not subscribe to the event's type, and when a job of it for this event still waits or
 * runs (a second one would run it twice at once). The handler's consume record for the event is
 * deleted, so a transactional handler runs again rather than skip an event it already consumed.
 */
export async function replayToHandler(driver: Driver, eventId: unknown, handler: unknown, now: Date | null): Promise<HandlerReplay> {
  if (!isUuid(eventId)) throw new NotFoundError(`event ${JSON.stringify(eventId)}`);
  checkHandlerName(handler, 'events.replay.handler');
  const id = eventId.toLowerCase();
  const r = await driver.operations.eventReplayToHandler({ eventId: id, handler, now });
  if (!r.found) throw new NotFoundError(`event ${id}`);
  if (r.poisoned) throw new BusStateError(`event ${id} is poisoned: requeue it (events.requeue, rea events requeue) and the relay delivers it to its handlers`);
  if (!r.fanned) throw new BusStateError(`event ${id} is not fanned out yet: the relay delivers it to its handlers`);
  if (r.patterns === null) throw await unknownHandler(driver, handler);
  if (!r.subscribes) throw new OptionsError('events.replay.handler', `handler '${handler}' does not subscribe to '${r.type}' (its patterns: ${r.patterns.join(', ')})`);
  if (r.waitingJobId !== null) {
    throw new BusStateError(`handler '${handler}' already has job ${r.waitingJobId} waiting or running for event ${id}: wait for it, or retry that job once it ends`);
  }
  return { jobId: r.jobId!, eventId: id, handler };
}

/** Which stored events a bulk replay takes: the events list's filter, without state and paging. */
export type EventReplayFilter = Pick<EventListFilter, 'type' | 'subject' | 'traceId' | 'since' | 'until'>;

const REPLAY_FILTER_KEYS: Record<keyof EventReplayFilter, true> = { type: true, subject: true, traceId: true, since: true, until: true };

/** What events.replay(filter, { handler }) did. */
export interface HandlerBulkReplay {
  handler: string;
  /** Events that got a new job of the handler. */
  replayed: number;
  /** Events left alone: a job of the handler for them still waits or runs. */
  skipped: number;
}

/** Events a bulk replay takes per transaction: each batch commits on its own, so a large replay holds no long transaction. */
export const REPLAY_BATCH = 500;

/**
 * events.replay(filter, { handler }): a new job of `handler` for every stored, fanned-out,
 * unpoisoned event that matches the filter and the handler's patterns, oldest first, in batches of
 * REPLAY_BATCH, each its own transaction; `onBatch` after each that made jobs (to wake workers).
 * Events with a job of the handler still waiting or running are skipped; consume records go as
 * for one event. A replay stopped half way (an error) has made the jobs of the batches before it.
 */
export async function replayEventsToHandler(
  driver: Driver, filter: unknown, handler: unknown, now: () => Date | null, onBatch: () => void,
): Promise<HandlerBulkReplay> {
  checkHandlerName(handler, 'events.replay.handler');
  if (filter === null || typeof filter !== 'object' || Array.isArray(filter)) throw new InvalidFilterError('filter', 'must be an object');
  for (const key of ['state', 'cursor', 'limit'] as const) {
    if (key in filter) throw new InvalidFilterError(key, 'is not a replay filter: a replay takes every fanned-out event that matches type, subject, traceId, since and until');
  }
  // A key it does not know (a typo, the CLI's `trace` for traceId) would be ignored, and the
  // replay would then take every event of the handler's types rather than the ones it named.
  rejectUnknownFilterKeys(filter, REPLAY_FILTER_KEYS, 'a replay');
  const p = eventListParams(filter as EventReplayFilter);
  if (!(await driver.operations.handlerSchedules()).some((h) => h.name === handler)) throw await unknownHandler(driver, handler);
  const params = { typePattern: p.typePattern, subject: p.subject, traceId: p.traceId, minId: p.minId, maxId: p.maxId };
  const total: HandlerBulkReplay = { handler, replayed: 0, skipped: 0 };
  for (let afterId: string | null = null; ;) {
    const batch = await driver.operations.eventReplayBatch({ handler, afterId, filter: params, limit: REPLAY_BATCH, now: now() });
    total.replayed += batch.replayed;
    total.skipped += batch.skipped;
    if (batch.replayed > 0) onBatch();
    if (batch.lastId === null) return total;
    afterId = batch.lastId;
  }
}
