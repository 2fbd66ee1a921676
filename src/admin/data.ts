// Reads shared by the JSON API and the panel, so a page and its API route never disagree.
import type { EndpointRow } from '../driver/webhooks.js';
import { notFound } from './http.js';
import type { AdminBus } from './route.js';
import { uuidParam } from './schemas.js';

export async function loadEvent(bus: AdminBus, rawId: string | undefined) {
  const id = uuidParam(rawId);
  const event = await bus.events.get(id);
  if (!event) throw notFound(`event ${id}`);
  const [jobs, attempts] = await Promise.all([bus.jobs.forEvent(id), bus.events.attempts(id, { limit: 200 })]);
  return { event, jobs, attempts };
}

export type EndpointView = EndpointRow;

/** An endpoint with only the fields the admin may show: a secret never leaves, whatever the bus returns. */
export function endpointView(e: EndpointView): EndpointView {
  return {
    id: e.id, url: e.url, description: e.description, eventTypes: e.eventTypes, state: e.state,
    failingSince: e.failingSince, lastSuccessAt: e.lastSuccessAt, disabledAt: e.disabledAt, disabledReason: e.disabledReason,
    secretHint: e.secretHint, createdAt: e.createdAt, updatedAt: e.updatedAt,
  };
}
