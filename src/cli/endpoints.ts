// rea endpoints add|list|update|enable|disable|rotate|delete|test|attempts: manage webhook endpoints. Output for
// people by default, --json for scripts. A secret is printed only by add and rotate, once.
import { Command } from 'commander';
import { createBus, type Bus } from '../bus.js';
import { defineEvents, type EventSchemas } from '../core/events.js';
import { NotFoundError, OptionsError } from '../core/errors.js';
import { flagError, UsageError } from './usage-error.js';
import type { Endpoint, EndpointWithSecret, WebhookAttempt } from '../channels/webhook/endpoints.js';
import type { EndpointState } from '../driver/webhooks.js';
import { guardWrites } from './admin-bus.js';
import { addConnectionFlags, onDatabase, resolveConnection, wholeNumber, type ConnectionFlags } from './settings.js';
import { EXIT_FAILED } from './exit-codes.js';
import { printable } from './printable.js';
import { isJobId } from '../core/job-id.js';
import { redactUrl } from '../core/redact-url.js';

interface Flags extends ConnectionFlags {
  json?: boolean;
  allowPrivateNetworks?: boolean;
}

async function withEndpointsBus<T>(flags: Flags, fn: (bus: Bus<EventSchemas>) => Promise<T>): Promise<T> {
  const { database, schema } = resolveConnection(flags);
  const allowPrivateNetworks = flags.allowPrivateNetworks === true || process.env.REA_WEBHOOKS_ALLOW_PRIVATE_NETWORKS === '1';
  // An admin bus: no event catalog (patterns are checked for shape only), never started.
  try {
    return await onDatabase(guardWrites(createBus({ database, schema, events: defineEvents({}), webhooks: { allowPrivateNetworks } })), fn);
  } catch (err) {
    throw asFlagError(err);
  }
}

// The bus names what it refused by its call (endpoints.create.eventTypes[1]); the user typed a flag.
const FLAG_OF: Record<string, string> = {
  'endpoints.create.url': '<url>', 'endpoints.create.eventTypes': '--events', 'endpoints.create.description': '--description',
  'endpoints.update.url': '--url', 'endpoints.update.eventTypes': '--events', 'endpoints.update.description': '--description',
  'endpoints.disable.reason': '--reason', 'endpoints.rotateSecret.graceMs': '--grace-ms',
};

function asFlagError(err: unknown): unknown {
  return err instanceof OptionsError ? flagError(err, (option) => FLAG_OF[option]) ?? err : err;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const STATES: readonly EndpointState[] = ['enabled', 'failing', 'disabled'];

/** Endpoint ids are UUIDs: anything else is a typo, not an endpoint that happens not to exist. */
function endpointId(command: string): (value: string) => string {
  return (value) => {
    if (!UUID.test(value)) throw new UsageError(`endpoints ${command} <id>`, `${value} is not an endpoint id (a UUID; rea endpoints list shows them)`);
    return value;
  };
}

function command(name: string, description: string): Command {
  return addConnectionFlags(new Command(name).description(description))
    .option('--json', 'print JSON')
    .option('--allow-private-networks', 'allow loopback and private addresses (local receivers; env REA_WEBHOOKS_ALLOW_PRIVATE_NETWORKS=1)');
}

const iso = (d: Date | null) => (d ? d.toISOString() : '-');

// The description and a disable reason are anyone's text (the API and the panel take control
// characters in them), so they reach the terminal through printable(), like a receiver's answer.
export function formatEndpoint(e: Endpoint): string {
  const lines = [
    `${e.id}  ${e.state}  ${printable(redactUrl(e.url))}`,
    `  events ${e.eventTypes.join(', ')} · secret …${e.secretHint}${e.description ? ` · ${printable(e.description)}` : ''}`,
  ];
  if (e.state === 'failing') lines.push(`  failing since ${iso(e.failingSince)}`);
  if (e.state === 'disabled') lines.push(`  disabled ${iso(e.disabledAt)}: ${printable(e.disabledReason ?? '-')}`);
  // In every state: "when did it last work?" is the first question about a failing or disabled one.
  // Noted to within a tenth of webhooks.failingDelayMs (see EndpointRow.lastSuccessAt); '-' for none.
  lines.push(`  last success ${iso(e.lastSuccessAt)}`);
  return lines.join('\n');
}

function printEndpoint(e: Endpoint, json: boolean | undefined): void {
  console.log(json ? JSON.stringify(e) : formatEndpoint(e));
}

function printWithSecret(e: EndpointWithSecret, json: boolean | undefined, what: string): void {
  if (json) return console.log(JSON.stringify(e));
  console.log(`${formatEndpoint(e)}\n${what}: ${e.secret}\n(shown once: store it now; receivers verify with it)`);
}

export function formatAttempt(a: WebhookAttempt): string {
  const status = a.status === null ? '---' : String(a.status);
  const detail = printable(a.error ?? (a.responseExcerpt ? a.responseExcerpt.replace(/\s+/g, ' ').slice(0, 80) : ''));
  return `${iso(a.at)}  ${a.outcome.padEnd(9)} ${status}  ${String(a.durationMs).padStart(5)} ms  #${a.attempt} ${a.deliveryId ?? 'test'}  ${detail}`;
}

function parseList(value: string): string[] {
  return value.split(',').map((s) => s.trim()).filter(Boolean);
}

export function endpointsCommand(): Command {
  const root = new Command('endpoints').description('webhook endpoints: add, list, update, enable, disable, rotate, delete, test, attempts');

  root.addCommand(
    command('add', 'add an endpoint; prints its secret once')
      .argument('<url>', 'http(s) URL that receives the POSTs')
      .requiredOption('--events <types>', "comma-separated event types or patterns ('order.*', '*')", parseList)
      .option('--description <text>', 'what it is for')
      .option('--secret <whsec>', 'use this Standard Webhooks secret (whsec_… or the base64 alone, printed with whsec_) instead of a generated one')
      .action(async (url: string, flags: Flags & { events: string[]; description?: string; secret?: string }) => {
        if (flags.events.length === 0) throw new UsageError('--events', "give at least one event type or pattern, e.g. --events 'order.*'");
        const e = await withEndpointsBus(flags, (bus) => bus.endpoints.create({ url, eventTypes: flags.events, description: flags.description, secret: flags.secret }));
        printWithSecret(e, flags.json, 'secret');
      }),
  );

  root.addCommand(
    command('list', 'list endpoints with their state (never their secrets)')
      .option('--state <state>', 'only enabled, failing or disabled endpoints')
      .option('--cursor <id>', 'the next page, as printed after the last one: endpoints created after this one')
      .option('--limit <n>', 'endpoints per page (1–1000); "(more: --cursor …)" follows only when more come after (--json: nextCursor)', wholeNumber(1, 1000), 1000)
      .action(async (flags: Flags & { state?: string; cursor?: string; limit: number }) => {
        if (flags.state !== undefined && !STATES.includes(flags.state as EndpointState)) {
          throw new UsageError('--state', `must be one of ${STATES.join(', ')}, got '${flags.state}'`);
        }
        if (flags.cursor !== undefined && !UUID.test(flags.cursor)) throw new UsageError('--cursor', `${flags.cursor} is not an endpoint id (a UUID)`);
        const { items: list, nextCursor } = await withEndpointsBus(flags, (bus) => bus.endpoints.page({
          state: flags.state as EndpointState | undefined, limit: flags.limit, ...(flags.cursor ? { after: flags.cursor } : {}),
        }));
        // As events list and jobs list print theirs: a bare array could not say whether more come.
        if (flags.json) return console.log(JSON.stringify({ items: list, nextCursor }));
        console.log(list.length ? list.map(formatEndpoint).join('\n') : 'no endpoints');
        if (nextCursor) console.log(`(more: --cursor ${nextCursor})`);
      }),
  );

  root.addCommand(
    command('update', "change an endpoint's URL, event types or description (its state and secret stay)")
      .argument('<id>', 'the endpoint id', endpointId('update'))
      .option('--url <url>', 'the new http(s) URL')
      .option('--events <types>', 'the new comma-separated event types or patterns (replaces the old list)', parseList)
      .option('--description <text>', "the new description ('' clears it)")
      .action(async (id: string, flags: Flags & { url?: string; events?: string[]; description?: string }) => {
        if (flags.url === undefined && flags.events === undefined && flags.description === undefined) {
          throw new UsageError('endpoints update', 'give at least one of --url, --events, --description');
        }
        if (flags.events !== undefined && flags.events.length === 0) throw new UsageError('--events', "give at least one event type or pattern, e.g. --events 'order.*'");
        const changes = { url: flags.url, eventTypes: flags.events, description: flags.description };
        printEndpoint(await withEndpointsBus(flags, (bus) => bus.endpoints.update(id, changes)), flags.json);
      }),
  );

  root.addCommand(
    command('enable', 'enable an endpoint (after a fix); clears failing and disabled state')
      .argument('<id>', 'the endpoint id', endpointId('enable'))
      .action(async (id: string, flags: Flags) => printEndpoint(await withEndpointsBus(flags, (bus) => bus.endpoints.enable(id)), flags.json)),
  );

  root.addCommand(
    command('disable', 'disable an endpoint: nothing new is enqueued for it')
      .argument('<id>', 'the endpoint id', endpointId('disable'))
      .option('--reason <text>', 'recorded with the endpoint')
      .action(async (id: string, flags: Flags & { reason?: string }) =>
        printEndpoint(await withEndpointsBus(flags, (bus) => bus.endpoints.disable(id, { reason: flags.reason })), flags.json)),
  );

  root.addCommand(
    command('rotate', 'rotate the secret; the old one keeps signing for the grace period; prints the new secret once')
      .argument('<id>', 'the endpoint id', endpointId('rotate'))
      .option('--grace-ms <ms>', 'how long the previous secret stays valid (default 24 h)', wholeNumber(0))
      .option('--secret <whsec>', 'use this Standard Webhooks secret (whsec_… or the base64 alone, printed with whsec_) instead of a generated one')
      .action(async (id: string, flags: Flags & { graceMs?: number; secret?: string }) => {
        printWithSecret(await withEndpointsBus(flags, (bus) => bus.endpoints.rotateSecret(id, { graceMs: flags.graceMs, secret: flags.secret })), flags.json, 'new secret');
      }),
  );

  root.addCommand(
    command('delete', 'delete an endpoint and its secrets, and cancel its waiting deliveries')
      .argument('<id>', 'the endpoint id', endpointId('delete'))
      .option('--yes', 'really delete (there is no undo; `disable` keeps the endpoint)')
      .action(async (id: string, flags: Flags & { yes?: boolean }) => {
        if (!flags.yes) throw new UsageError('endpoints delete', `deleting ${id} cannot be undone: add --yes (or use rea endpoints disable, which keeps it)`);
        const deleted = await withEndpointsBus(flags, (bus) => bus.endpoints.delete(id));
        if (!deleted) throw new NotFoundError(`endpoint ${id}`);
        const waiting = deleted.cancelled === 1 ? '1 waiting delivery' : `${deleted.cancelled} waiting deliveries`;
        console.log(flags.json ? JSON.stringify({ id, deleted: true, cancelled: deleted.cancelled }) : `deleted endpoint ${id}; cancelled ${waiting}`);
      }),
  );

  root.addCommand(
    command('test', 'send one signed test event to an endpoint now and show the answer; a disabled endpoint too (try a fixed receiver before enable), and its state stays as it is')
      .argument('<id>', 'the endpoint id', endpointId('test'))
      .action(async (id: string, flags: Flags) => {
        const r = await withEndpointsBus(flags, (bus) => bus.endpoints.test(id));
        if (flags.json) console.log(JSON.stringify(r));
        else {
          const answer = r.status === null ? 'no answer' : `HTTP ${r.status}`;
          console.log(`${r.outcome}: ${answer} in ${r.durationMs} ms${r.error ? ` (${printable(r.error)})` : ''}`);
          if (r.responseExcerpt) console.log(`response: ${printable(r.responseExcerpt.slice(0, 200))}`);
          console.log(`webhook-id ${r.webhookId}`);
        }
        if (r.outcome !== 'success') process.exitCode = EXIT_FAILED;
      }),
  );

  root.addCommand(
    command('attempts', "an endpoint's delivery attempts, newest first")
      .argument('<id>', 'the endpoint id', endpointId('attempts'))
      .option('--limit <n>', 'attempts per page (1–500, as in the HTTP API); "(more: --cursor …)" follows only when older ones remain (--json: nextCursor)', wholeNumber(1, 500), 20)
      .option('--cursor <attempt>', 'the next page, as printed after the last one: attempts older than this one')
      .action(async (id: string, flags: Flags & { limit: number; cursor?: string }) => {
        if (flags.cursor !== undefined && !isJobId(flags.cursor)) throw new UsageError('--cursor', `${flags.cursor} is not an attempt id (a whole number, as printed after "(more: --cursor")`);
        // A deleted endpoint's log is listed while attempts remain; an id with neither is not found.
        const { items: list, nextCursor } = await withEndpointsBus(flags, (bus) => bus.endpoints.attemptPage(id, {
          limit: flags.limit, ...(flags.cursor ? { before: flags.cursor } : {}),
        }));
        if (flags.json) return console.log(JSON.stringify({ items: list, nextCursor }));
        console.log(list.length ? list.map(formatAttempt).join('\n') : 'no attempts');
        if (nextCursor) console.log(`(more: --cursor ${nextCursor})`);
      }),
  );

  return root;
}
