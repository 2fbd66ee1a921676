// The WebhookExecutor for PostgreSQL dialects (pg and PGlite share it): runs the webhook
// statements and maps rows to rea's own types.
import type { Queryable } from '../../driver/types.js';
import type {
  AttemptInsert, AttemptRow, EndpointForDelivery, EndpointRow, EndpointState, HealthEffect, WebhookExecutor, WebhookJobParams,
} from '../../driver/webhooks.js';
import { patternToLike } from './patterns.js';
import { webhookStatements, type WebhookStatements } from './sql-webhooks.js';

type Row = Record<string, any>;

export class PostgresWebhookExecutor implements WebhookExecutor {
  private readonly sql: WebhookStatements;

  constructor(private readonly pool: Queryable, schema: string) {
    this.sql = webhookStatements(schema);
  }

  async endpointInsert(p: {
    id: string; url: string; description: string; eventTypes: string[]; secret: string; secretHint: string; now: Date | null;
  }): Promise<EndpointRow> {
    const { rows } = await this.pool.query<Row>(this.sql.endpointInsert, [
      p.id, p.url, p.description, p.eventTypes, p.eventTypes.map(patternToLike), p.secret, p.secretHint, p.now,
    ]);
    return mapEndpoint(rows[0]!);
  }

  async endpointList(p: { state: EndpointState | null; limit: number; after: string | null }): Promise<EndpointRow[]> {
    const { rows } = await this.pool.query<Row>(this.sql.endpointList, [p.state, p.limit, p.after]);
    return rows.map(mapEndpoint);
  }

  async endpointGet(p: { id: string }): Promise<EndpointRow | null> {
    const { rows } = await this.pool.query<Row>(this.sql.endpointGet, [p.id]);
    return rows[0] ? mapEndpoint(rows[0]) : null;
  }

  async endpointUpdate(p: {
    id: string; url: string | null; description: string | null; eventTypes: string[] | null; now: Date | null;
  }): Promise<EndpointRow | null> {
    const { rows } = await this.pool.query<Row>(this.sql.endpointUpdate, [p.id, p.url, p.description, p.eventTypes, p.eventTypes?.map(patternToLike) ?? null, p.now]);
    return rows[0] ? mapEndpoint(rows[0]) : null;
  }

  async endpointSetState(p: { id: string; state: 'enabled' | 'disabled'; reason: string | null; now: Date | null }): Promise<EndpointRow | null> {
    const { rows } = await this.pool.query<Row>(this.sql.endpointSetState, [p.id, p.state, p.reason, p.now]);
    return rows[0] ? mapEndpoint(rows[0]) : null;
  }

  async endpointRotateSecret(p: { id: string; secret: string; secretHint: string; graceMs: number; now: Date | null }): Promise<EndpointRow | null> {
    const { rows } = await this.pool.query<Row>(this.sql.endpointRotateSecret, [p.id, p.secret, p.secretHint, p.graceMs, p.now]);
    return rows[0] ? mapEndpoint(rows[0]) : null;
  }

  async endpointDelete(p: { id: string; now: Date | null }): Promise<{ cancelled: number } | null> {
    const { rows } = await this.pool.query<Row>(this.sql.endpointDelete, [p.id, p.now]);
    return rows[0]!.deleted === 1 ? { cancelled: rows[0]!.cancelled as number } : null;
  }

  async endpointGetForDelivery(p: { id: string; now: Date | null }): Promise<EndpointForDelivery | null> {
    const { rows } = await this.pool.query<Row>(this.sql.endpointGetForDelivery, [p.id, p.now]);
    const r = rows[0];
    return r ? { id: r.id, url: r.url, state: r.state, eventTypes: r.event_types as string[], secrets: r.secrets as string[] } : null;
  }

  async endpointDisableFailing(p: { failingForMs: number; reason: string; limit: number; now: Date | null }): Promise<string[]> {
    const { rows } = await this.pool.query<Row>(this.sql.endpointDisableFailing, [p.failingForMs, p.reason, p.now, p.limit]);
    return rows.map((r) => r.id as string);
  }

  async attemptRecord(p: { attempt: AttemptInsert; health: HealthEffect; failingDelayMs: number; now: Date | null }): Promise<{ stateChangedTo: EndpointState | null }> {
    const a = p.attempt;
    const { rows } = await this.pool.query<Row>(this.sql.attemptRecord, [
      a.jobId, a.endpointId, a.eventId, a.webhookId, a.attempt, a.status, Math.round(a.durationMs), a.outcome,
      a.responseExcerpt, a.error, p.health.effect, p.now, p.health.effect === 'gone' ? p.health.reason : null, p.failingDelayMs,
      p.health.effect === 'failure' ? p.health.answered : null,
    ]);
    return { stateChangedTo: (rows[0]?.state_changed_to ?? null) as EndpointState | null };
  }

  async attemptList(p: { endpointId: string | null; eventId: string | null; beforeId: string | null; limit: number }): Promise<AttemptRow[]> {
    const { rows } = p.endpointId
      ? await this.pool.query<Row>(this.sql.attemptListForEndpoint, [p.endpointId, p.beforeId, p.limit])
      : await this.pool.query<Row>(this.sql.attemptListForEvent, [p.eventId, p.beforeId, p.limit]);
    return rows.map(mapAttempt);
  }

  async attemptDeleteOlder(p: { olderThanMs: number; limit: number; now: Date | null }): Promise<number> {
    const { rows } = await this.pool.query<Row>(this.sql.attemptDeleteOlder, [p.olderThanMs, p.now, p.limit]);
    return rows[0]?.n ?? 0;
  }

  async webhookJobInsert(p: { eventId: string; endpointId: string; job: WebhookJobParams; now: Date | null }): Promise<string | null> {
    const { rows } = await this.pool.query<Row>(this.sql.webhookJobInsert, [p.eventId, p.endpointId, p.job.maxAttempts, p.job.leaseMs, p.now]);
    return rows[0]?.id ?? null;
  }

  async webhookJobGet(p: { jobId: string }): Promise<{ eventId: string; endpointId: string } | null> {
    const { rows } = await this.pool.query<Row>(this.sql.webhookJobGet, [p.jobId]);
    return rows[0] ? { eventId: rows[0].event_id, endpointId: rows[0].target } : null;
  }
}

function mapEndpoint(r: Row): EndpointRow {
  return {
    id: r.id, url: r.url, description: r.description, eventTypes: r.event_types, state: r.state,
    failingSince: r.failing_since ?? null, lastSuccessAt: r.last_success_at ?? null, disabledAt: r.disabled_at ?? null, disabledReason: r.disabled_reason ?? null,
    secretHint: r.secret_hint, createdAt: r.created_at, updatedAt: r.updated_at,
  };
}

function mapAttempt(r: Row): AttemptRow {
  return {
    id: r.id, deliveryId: r.delivery_id ?? null, endpointId: r.endpoint_id, eventId: r.event_id, webhookId: r.webhook_id,
    attempt: r.attempt, at: r.at, status: r.status ?? null, durationMs: r.duration_ms, outcome: r.outcome,
    responseExcerpt: r.response_excerpt, error: r.error ?? null,
  };
}
