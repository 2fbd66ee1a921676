// Reads shared by the JSON API and the panel, so a page and its API route never disagree.
import { notFound } from './http.js';
import { optionalApi, type AdminBus } from './route.js';
import { uuidParam } from './schemas.js';

export interface DeliveryAttempt {
  id: string;
  deliveryId: string | null;
  endpointId: string;
  eventId: string;
  attempt: number;
  at: Date;
  status: number | null;
  durationMs: number;
  outcome: string;
  responseExcerpt: string;
  error: string | null;
}

export async function loadEvent(bus: AdminBus, rawId: string | undefined) {
  const id = uuidParam(rawId);
  const event = await bus.events.get(id);
  if (!event) throw notFound(`event ${id}`);
  const [jobs, attempts] = await Promise.all([bus.jobs.forEvent(id), attemptsForEvent(bus, id)]);
  return { event, jobs, attempts };
}

/** The webhook attempt log of one event (empty when this build has no webhooks). */
export async function attemptsForEvent(bus: AdminBus, eventId: string): Promise<DeliveryAttempt[]> {
  const list = optionalApi<(id: string, o: { limit: number }) => Promise<DeliveryAttempt[]>>(bus.events, 'attempts');
  return list ? list(eventId, { limit: 200 }) : [];
}

export interface EndpointView {
  id: string;
  url: string;
  description: string;
  eventTypes: string[];
  state: string;
  failingSince: Date | null;
  disabledAt: Date | null;
  disabledReason: string | null;
  secretHint: string;
  createdAt: Date;
  updatedAt: Date;
}

/** An endpoint with only the fields the admin may show: a secret never leaves, whatever the bus returns. */
export function endpointView(e: EndpointView): EndpointView {
  return {
    id: e.id, url: e.url, description: e.description, eventTypes: e.eventTypes, state: e.state,
    failingSince: e.failingSince, disabledAt: e.disabledAt, disabledReason: e.disabledReason,
    secretHint: e.secretHint, createdAt: e.createdAt, updatedAt: e.updatedAt,
  };
}
