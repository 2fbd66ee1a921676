// PostgreSQL migrations, numbered and append-only. `{schema}` is replaced by the quoted schema name.
// Never edit a shipped migration: add the next number.

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export const migrations: Migration[] = [
  {
    version: 1,
    name: 'initial',
    sql: /* sql */ `
create table {schema}.events (
  id            uuid primary key,
  type          text not null,
  subject       text,
  payload       jsonb not null,
  trace_id      text,
  created_by    text,
  version       integer not null default 1,
  created_at    timestamptz not null default now(),
  fanned_out_at timestamptz,
  fan_attempts  integer not null default 0,
  poisoned_at   timestamptz,
  last_error    text
) with (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);

-- Only live rows are indexed, so a claim costs the same however much history the table holds.
create index events_unfanned_idx on {schema}.events (id)
  where fanned_out_at is null and poisoned_at is null;
create index events_poisoned_idx on {schema}.events (poisoned_at)
  where poisoned_at is not null;

create table {schema}.jobs (
  id               bigint generated always as identity primary key,
  event_id         uuid not null,
  kind             text not null check (kind in ('handler', 'webhook', 'forward')),
  target           text not null,
  state            text not null default 'available'
                   check (state in ('available', 'running', 'completed', 'retryable', 'discarded', 'cancelled')),
  attempt          integer not null default 0,
  max_attempts     integer not null check (max_attempts > 0),
  priority         smallint not null default 0,
  coalesced        integer not null default 1,
  lease_ms         integer not null check (lease_ms > 0),
  scheduled_at     timestamptz not null default now(),
  attempted_at     timestamptz,
  attempted_by     text,
  finalized_at     timestamptz,
  lease_expires_at timestamptz,
  errors           jsonb not null default '[]'::jsonb,
  created_at       timestamptz not null default now()
);

create index jobs_claim_idx on {schema}.jobs (kind, target, priority, scheduled_at, id)
  where state in ('available', 'retryable');
create index jobs_lease_idx on {schema}.jobs (lease_expires_at)
  where state = 'running';
create index jobs_event_idx on {schema}.jobs (event_id);
create index jobs_finalized_idx on {schema}.jobs (state, finalized_at)
  where finalized_at is not null;

create table {schema}.consumes (
  event_id    uuid not null,
  handler     text not null,
  consumed_at timestamptz not null default now(),
  primary key (event_id, handler)
);

create table {schema}.handlers (
  name             text primary key,
  patterns         text[] not null,
  like_patterns    text[] not null,
  coalesce_subject boolean not null default false,
  max_attempts     integer not null,
  lease_ms         integer not null,
  priority         smallint not null default 0,
  updated_at       timestamptz not null default now()
);

create table {schema}.leader (
  name       text primary key,
  leader_id  text not null,
  elected_at timestamptz not null,
  expires_at timestamptz not null
);
`,
  },
  {
    version: 2,
    name: 'uuid_v7',
    // Ids made inside the database (capture triggers) must sort like the app's UUIDv7 ids, because
    // the relay claims in id order. The 12 bits after the version hold the sub-millisecond part of
    // clock_timestamp() (RFC 9562 method 3), and a session-local high-water mark makes ids strictly
    // increasing within one session even when the clock has not moved (several rows in one
    // statement). The random tail comes from gen_random_uuid(), core since PG 13, so no pgcrypto.
    sql: /* sql */ `
create function {schema}.uuid_v7() returns uuid
language plpgsql volatile
as $fn$
declare
  now_us bigint := floor(extract(epoch from clock_timestamp()) * 1000000)::bigint;
  -- Milliseconds in the high bits, 1/4096 ms in the low 12: one number to compare and bump.
  tick   bigint := (now_us / 1000) * 4096 + ((now_us % 1000) * 4096) / 1000;
  last   bigint := nullif(current_setting('rea.uuid_v7_last', true), '')::bigint;
begin
  if last is not null and tick <= last then
    tick := last + 1;
  end if;
  perform set_config('rea.uuid_v7_last', tick::text, false);
  -- 6 bytes of unix ms, then version 7 and the 12-bit fraction, then 8 random bytes whose first
  -- byte already carries the RFC variant bits (gen_random_uuid is version 4, same variant).
  return encode(
    substring(int8send(tick >> 12) from 3)
      || int2send((28672 + (tick & 4095))::smallint)
      || substring(uuid_send(gen_random_uuid()) from 9),
    'hex')::uuid;
end
$fn$;
`,
  },
  {
    version: 3,
    name: 'webhooks',
    // Endpoints and the webhook attempt log. Secrets live in their own column that list/get never
    // select; only `secret_hint` (the newest secret's last 4 characters) is ever read back.
    sql: /* sql */ `
create table {schema}.endpoints (
  id              uuid primary key,
  url             text not null,
  description     text not null default '',
  event_types     text[] not null,
  like_patterns   text[] not null,
  state           text not null default 'enabled' check (state in ('enabled', 'failing', 'disabled')),
  failing_since   timestamptz,
  disabled_at     timestamptz,
  disabled_reason text,
  -- [{ "secret": "whsec_…", "created_at": …, "expires_at": null | … }], newest first
  secrets         jsonb not null,
  secret_hint     text not null,
  created_at      timestamptz not null default now(),
  updated_at      timestamptz not null default now()
);

-- The health pass looks only at failing endpoints.
create index endpoints_failing_idx on {schema}.endpoints (failing_since) where state = 'failing';

create table {schema}.webhook_attempts (
  id               bigint generated always as identity primary key,
  -- Null for an endpoints test delivery, which is not a job.
  job_id           bigint,
  endpoint_id      uuid not null,
  event_id         uuid not null,
  webhook_id       text not null,
  attempt          integer not null,
  at               timestamptz not null,
  status           integer,
  duration_ms      integer not null,
  outcome          text not null check (outcome in ('success', 'failure', 'gone', 'throttled', 'refused')),
  response_excerpt text not null default '',
  error            text
);

create index webhook_attempts_at_idx on {schema}.webhook_attempts (at);
create index webhook_attempts_endpoint_idx on {schema}.webhook_attempts (endpoint_id, id);
create index webhook_attempts_event_idx on {schema}.webhook_attempts (event_id);

-- Webhook workers claim "any endpoint" rather than one target at a time; this index hands them
-- the due jobs in claim order without a probe per endpoint. Partial, so handler jobs do not pay.
create index jobs_claim_any_idx on {schema}.jobs (kind, priority, scheduled_at, id)
  where state in ('available', 'retryable') and kind in ('webhook', 'forward');
`,
  },
  {
    version: 4,
    name: 'retention',
    // Number 3 is the webhooks migration, developed in parallel; the runner applies whatever is
    // missing in array order, so 4 may land before 3 and both still apply exactly once.
    //
    // Archive mode moves fanned events here instead of deleting them. Same columns as events plus
    // archived_at; the primary key on the (time-ordered UUIDv7) id is the only index, because the
    // archive's own retention deletes by id range, exactly like events retention does. No new
    // index on events, jobs or consumes is needed either: events and consumes are trimmed by
    // primary-key range (UUIDv7 ids sort by time), jobs through jobs_finalized_idx.
    sql: /* sql */ `
create table {schema}.events_archive (
  id            uuid primary key,
  type          text not null,
  subject       text,
  payload       jsonb not null,
  trace_id      text,
  created_by    text,
  version       integer not null default 1,
  created_at    timestamptz not null,
  fanned_out_at timestamptz,
  fan_attempts  integer not null default 0,
  poisoned_at   timestamptz,
  last_error    text,
  archived_at   timestamptz not null default now()
);
`,
  },
  {
    version: 5,
    name: 'queue_autovacuum',
    // Every job row is written three times (insert, claim, finish) and then deleted by retention,
    // so the jobs table churns faster than any other: vacuum it at 2 % dead rows, as events, so
    // its dead tuples are reclaimed before they pile up. Consume records and attempts churn with it.
    sql: /* sql */ `
alter table {schema}.jobs set (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
alter table {schema}.consumes set (autovacuum_vacuum_scale_factor = 0.02);
alter table {schema}.webhook_attempts set (autovacuum_vacuum_scale_factor = 0.02);
`,
  },
  {
    version: 6,
    name: 'handler_seen',
    // When a running worker last had each handler. A handler removed from the code keeps its row
    // (the relay still routes to it: an outage must not drop deliveries), so the overview needs
    // this to tell "nobody runs it any more" from "its workers are busy".
    sql: /* sql */ `
alter table {schema}.handlers add column seen_at timestamptz not null default now();
`,
  },
  {
    version: 7,
    name: 'delivered_inline',
    // A relay round may run this process's handlers itself, in the round's transaction (inline
    // delivery): a delivery that succeeds there gets no job row, and its handler's name is kept
    // on the event instead, so the event still says who received it.
    sql: /* sql */ `
alter table {schema}.events add column delivered_inline text[];
alter table {schema}.events_archive add column delivered_inline text[];
`,
  },
  {
    version: 8,
    name: 'admin_sessions_ended',
    // The admin panel's sessions are signed cookies, valid for 12 h wherever the credentials are
    // the same; a logout lists its session here so every process serving the panel refuses the
    // cookie from then on. The id is a hash of the cookie, never the cookie. A row is worth
    // nothing once its session has expired, and each logout deletes the expired ones: the table
    // holds at most the sessions logged out in the last 12 h.
    sql: /* sql */ `
create table {schema}.admin_sessions_ended (
  id         text primary key,
  expires_at timestamptz not null
);
`,
  },
  {
    version: 9,
    name: 'event_span',
    // The OpenTelemetry span that recorded an event (16 hex digits, and its W3C trace flags), so
    // that its handlers' spans get that span as their parent, sampled as it was. Null where record()
    // saw no span in the event's trace, and in rows written before this migration, by a capture
    // trigger or by hand. Not breaking: an older rea leaves both null and never reads them.
    sql: /* sql */ `
alter table {schema}.events add column span_id text, add column trace_flags smallint;
alter table {schema}.events_archive add column span_id text, add column trace_flags smallint;
`,
  },
  {
    version: 10,
    name: 'delivery_held_until',
    // The scheduled_at a failing endpoint's delay gave a webhook delivery (one moved out by a
    // failed attempt, or made while the endpoint was failing). The success that makes the endpoint
    // enabled again brings back only the deliveries whose schedule is still that one: before, it
    // brought back every delivery due within failingDelayMs, those waiting for their own backoff or
    // Retry-After too, which were then sent at once. Not breaking: an older rea never sets it, and
    // a schedule it writes no longer equals it.
    sql: /* sql */ `
alter table {schema}.jobs add column held_until timestamptz;
`,
  },
  {
    version: 11,
    name: 'endpoint_last_success',
    // When a delivery to the endpoint last succeeded, noted at most once every tenth of
    // failingDelayMs (a HOT update: no index covers it), so a healthy endpoint is not written at
    // every delivery. A failed attempt the receiver answered turns the endpoint failing only when
    // this is older than failingDelayMs (see attemptRecord). Not breaking: an older rea never notes
    // it, and a newer one then turns the endpoint failing at any failure, as the older one does.
    sql: /* sql */ `
alter table {schema}.endpoints add column last_success_at timestamptz;
`,
  },
  {
    version: 12,
    name: 'secret_hint_before_padding',
    // An endpoint's secret hint is the newest secret's last 4 characters before the base64
    // padding: the last 4 of a generated secret always ended in '=' (3 characters told apart).
    // Only hints ending in '=' change; a secret without padding keeps its hint.
    sql: /* sql */ `
update {schema}.endpoints
set secret_hint = right(rtrim(secrets -> 0 ->> 'secret', '='), 4)
where secret_hint like '%=' and length(secrets -> 0 ->> 'secret') >= 16;
`,
  },
];
