// GET /jobs: jobs by state and handler, the dead letters (discarded) first among the tabs, with
// retry, cancel and discard buttons.
import { actionButton, badge, html, lastJobError, layout, table, time, type PageContext, type Safe } from '../html.js';
import { JOB_LIST_KINDS } from '../../core/filters.js';
import { HttpError } from '../http.js';
import { defineRoute, parse, queryFields } from '../route.js';
import { jobListQuery } from '../schemas.js';
import { jobActions } from './page-event.js';

/** The filters the bulk retry can honour: it retries by state and handler, on every page. */
const BULK_RETRY_FILTERS = new Set(['state', 'handler', 'cursor', 'limit']);

/**
 * "Retry all dead letters" posts { state: 'discarded', handler? }. Under a filter it cannot pass
 * on (an event id, a kind) it would retry dead letters the page does not show, so it is not
 * offered there; each row keeps its own Retry button.
 */
function bulkRetry(p: PageContext, raw: Record<string, string>, here: string): Safe {
  // kind=handler with a handler named says nothing more than the handler does: only handler jobs
  // are that handler's (a webhook job's target is an endpoint id).
  const implied = (k: string) => k === 'kind' && raw.kind === 'handler' && raw.handler !== undefined;
  const unhonoured = Object.keys(raw).filter((k) => !BULK_RETRY_FILTERS.has(k) && !implied(k));
  if (unhonoured.length) {
    return html`<p class="muted">Retry all works by handler only: with ${unhonoured.join(' and ')} set, retry jobs one by one.</p>`;
  }
  const label = raw.handler ? `Retry all dead letters of ${raw.handler}` : 'Retry all dead letters';
  const confirm = raw.handler ? `Retry every discarded job of ${raw.handler}, on every page?` : 'Retry every discarded job, of every handler, on every page?';
  return html`<div class="actions">${actionButton(p, '/api/jobs/retry', label, { fields: { state: 'discarded', ...(raw.handler ? { handler: raw.handler } : {}) }, confirm, returnTo: here })}</div>`;
}

const TABS: [string, string][] = [['discarded', 'Dead letters'], ['retryable', 'Retrying'], ['available', 'Waiting'], ['running', 'Running'], ['cancelled', 'Cancelled'], ['completed', 'Completed'], ['', 'All']];

export default defineRoute({
  method: 'GET', path: '/jobs', access: 'user', kind: 'page',
  async handle(ctx) {
    const p = ctx.page;
    const raw = queryFields(ctx.query);
    let error: string | null = null;
    let page: Awaited<ReturnType<typeof ctx.bus.jobs.list>> = { items: [], nextCursor: null };
    try {
      const filter = parse(jobListQuery, raw);
      page = await ctx.bus.jobs.list(filter as Parameters<typeof ctx.bus.jobs.list>[0]);
    } catch (err) {
      if (!(err instanceof HttpError) && !(err instanceof Error && 'parameter' in err)) throw err;
      error = err.message;
    }
    const handlers = await ctx.bus.driver.admin.handlerNames();
    const state = raw.state ?? '';
    const here = `/jobs?${new URLSearchParams(Object.entries(raw).filter(([k]) => k !== 'cursor')).toString()}`;
    // A tab changes the state and keeps every other filter (kind, handler, event id, page size);
    // it starts at the first page. Before, a tab kept the handler only.
    const otherFilters = Object.fromEntries(Object.entries(raw).filter(([k]) => k !== 'state' && k !== 'cursor'));
    const tabs = html`<nav class="tabs">${TABS.map(([s, label]) => html`<a href="${p.base}/jobs?${new URLSearchParams({ ...(s ? { state: s } : {}), ...otherFilters }).toString()}"${s === state ? html` aria-current="page"` : ''}>${label}</a>`)}</nav>`;
    const filters = html`<form class="filters" method="get" action="${p.base}/jobs">
${state ? html`<input type="hidden" name="state" value="${state}">` : ''}${raw.limit ? html`<input type="hidden" name="limit" value="${raw.limit}">` : ''}
<label>Kind <select name="kind"><option value="">any</option>${JOB_LIST_KINDS.map((k) => html`<option value="${k}"${k === raw.kind ? html` selected` : ''}>${k}</option>`)}</select></label>
<label>Handler <select name="handler"><option value="">any</option>${handlers.map((h) => html`<option value="${h}"${h === raw.handler ? html` selected` : ''}>${h}</option>`)}</select></label>
<label>Event id <input name="eventId" value="${raw.eventId ?? ''}"></label>
<button type="submit">Filter</button></form>`;
    const bulk = state === 'discarded' && page.items.length ? bulkRetry(p, raw, here) : '';
    const rows = page.items.map((j) => [
      html`<code>${j.id}</code>`, html`<code>${j.target}</code>`, badge(j.state),
      j.eventType ? html`<a href="${p.base}/events/${j.eventId}"><code>${j.eventType}</code></a> ${j.eventSubject ?? ''}` : html`<span class="muted">event removed</span>`,
      `${j.attempt}/${j.maxAttempts}`, time(j.finalizedAt ?? j.attemptedAt ?? j.scheduledAt),
      lastJobError(j),
      jobActions(p, j.id, j.state, here),
    ]);
    const next = page.nextCursor ? new URLSearchParams({ ...raw, cursor: page.nextCursor }) : null;
    const body = html`<h1>Jobs</h1>${tabs}${filters}
${error ? html`<p class="notice alert" role="alert">${error}</p>` : ''}${bulk}
${table(['Job', 'Handler', 'State', 'Event', 'Attempt', 'When', 'Last error', ''], rows, 'No jobs match.')}
<nav class="pager">${next ? html`<a href="${p.base}/jobs?${next.toString()}" rel="next">older →</a>` : ''}</nav>`;
    return { html: layout(p, 'Jobs', body), status: error ? 400 : 200 };
  },
});
