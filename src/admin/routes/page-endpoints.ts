// GET /endpoints: webhook endpoints with state, failing since, last success and disabled reason; re-enable,
// disable, rotate and test buttons; a form to add one.
import { z } from 'zod';
import { redactUrl } from '../../core/redact-url.js';
import { endpointView, type EndpointView } from '../data.js';
import { actionButton, badge, html, layout, table, time } from '../html.js';
import { defineRoute, parse, queryFields } from '../route.js';
import { uuid } from '../schemas.js';

const query = z.object({
  state: z.enum(['enabled', 'failing', 'disabled']).optional(),
  cursor: uuid.optional(),
}).strip();
/** Endpoints a page shows; a page links to the next only when one follows. */
const PAGE_SIZE = 200;

export default defineRoute({
  method: 'GET', path: '/endpoints', access: 'user', kind: 'page',
  async handle(ctx) {
    const p = ctx.page;
    const filter = parse(query, queryFields(ctx.query));
    const page = await ctx.bus.endpoints.page({
      ...(filter.state ? { state: filter.state } : {}), limit: PAGE_SIZE, ...(filter.cursor ? { after: filter.cursor } : {}),
    });
    const endpoints = page.items.map(endpointView);
    const href = (cursor?: string) => {
      const q = new URLSearchParams({ ...(filter.state ? { state: filter.state } : {}), ...(cursor ? { cursor } : {}) }).toString();
      return `${p.base}/endpoints${q ? `?${q}` : ''}`;
    };
    const rows = endpoints.map((e) => [
      html`<a href="${p.base}/endpoints/${e.id}"><code>${redactUrl(e.url)}</code></a>${e.description ? html`<div class="muted">${e.description}</div>` : ''}`,
      html`<code>${e.eventTypes.join(', ')}</code>`,
      badge(e.state), time(e.failingSince), time(e.lastSuccessAt), e.disabledReason ?? '', html`<code>…${e.secretHint}</code>`,
      endpointActions(p, e, '/endpoints'),
    ]);
    const body = html`<h1>Endpoints</h1>
<nav class="tabs">${(['', 'enabled', 'failing', 'disabled'] as const).map((s) => html`<a href="${p.base}/endpoints${s ? `?state=${s}` : ''}"${(filter.state ?? '') === s ? html` aria-current="page"` : ''}>${s || 'all'}</a>`)}</nav>
${table(['URL', 'Event types', 'State', 'Failing since', 'Last success', 'Disabled reason', 'Secret', ''], rows, 'No endpoints.')}
<nav class="pager">${filter.cursor ? html`<a href="${href()}">first</a>` : ''}${page.nextCursor ? html`<a href="${href(page.nextCursor)}" rel="next">more →</a>` : ''}</nav>
<h2>Add an endpoint</h2>
<form class="stack" method="post" action="${p.base}/api/endpoints">
<input type="hidden" name="_csrf" value="${p.csrf ?? ''}"><input type="hidden" name="_return" value="/endpoints">
<label>URL <input type="url" name="url" required placeholder="https://example.com/webhooks/rea"></label>
<label>Event types (comma-separated; order.* patterns) <input name="eventTypes" required placeholder="order.created, order.*"></label>
<label>Description <input name="description"></label>
<div><button type="submit" class="primary">Add endpoint</button> <span class="muted">rea generates the signing secret and shows it once, on the next page.</span></div>
</form>`;
    return { html: layout(p, 'Endpoints', body) };
  },
});

// A failing endpoint is the one an operator most often wants to stop, so it offers Disable as well
// as Mark healthy (before, it offered only the latter, and stopping it took the API or the CLI).
export function endpointActions(p: Parameters<typeof actionButton>[0], e: EndpointView, returnTo: string) {
  return html`${e.state !== 'enabled'
    ? actionButton(p, `/api/endpoints/${e.id}/enable`, e.state === 'disabled' ? 'Re-enable' : 'Mark healthy', { returnTo, kind: 'primary' })
    : ''}${e.state !== 'disabled'
    ? actionButton(p, `/api/endpoints/${e.id}/disable`, 'Disable', { returnTo, confirm: `Disable ${redactUrl(e.url)}? Fan-out will skip it.`, kind: 'danger' })
    : ''}${actionButton(p, `/api/endpoints/${e.id}/rotate`, 'Rotate secret', { returnTo, confirm: 'Rotate the signing secret? The old one keeps working for the grace period.' })}${actionButton(p, `/api/endpoints/${e.id}/test`, 'Send test', { returnTo })}${actionButton(p, `/api/endpoints/${e.id}/delete`, 'Delete', { returnTo: '/endpoints', confirm: `Delete ${redactUrl(e.url)}, its secrets and its waiting deliveries? There is no undo (Disable keeps it).`, kind: 'danger' })}`;
}
