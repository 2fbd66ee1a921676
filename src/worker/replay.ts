// events.replay(eventId, { handler }): a stored event sent again to one in-process handler, as a
// new job. For a handler added after the event (an unrouted event is a fact a later subscriber
// can replay), or one whose effect must be made again once its code is fixed.
import { BusStateError, NotFoundError, OptionsError } from '../core/errors.js';
import type { Driver } from '../driver/types.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

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
  if (typeof eventId !== 'string' || !UUID.test(eventId)) throw new NotFoundError(`event ${JSON.stringify(eventId)}`);
  if (typeof handler !== 'string' || handler === '') throw new OptionsError('events.replay.handler', 'must be a handler name');
  const id = eventId.toLowerCase();
  const r = await driver.operations.eventReplayToHandler({ eventId: id, handler, now });
  if (!r.found) throw new NotFoundError(`event ${id}`);
  if (r.poisoned) throw new BusStateError(`event ${id} is poisoned: requeue it (events.requeue, rea events requeue) and the relay delivers it to its handlers`);
  if (!r.fanned) throw new BusStateError(`event ${id} is not fanned out yet: the relay delivers it to its handlers`);
  if (r.patterns === null) {
    const names = (await driver.operations.handlerSchedules()).map((h) => `'${h.name}'`);
    throw new NotFoundError(`handler ${JSON.stringify(handler)}`, `known handlers: ${names.length ? names.join(', ') : '(none registered)'}`);
  }
  if (!r.subscribes) throw new OptionsError('events.replay.handler', `handler '${handler}' does not subscribe to '${r.type}' (its patterns: ${r.patterns.join(', ')})`);
  if (r.waitingJobId !== null) {
    throw new BusStateError(`handler '${handler}' already has job ${r.waitingJobId} waiting or running for event ${id}: wait for it, or retry that job once it ends`);
  }
  return { jobId: r.jobId!, eventId: id, handler };
}
