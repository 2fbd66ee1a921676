// The panel's HTML toolkit: one escaping function every value passes through, the page layout
// with its inline (nonce'd) CSS and script, and small builders for tables, badges and forms.
// Values from events (payloads, subjects, types, errors, response excerpts) only ever enter the
// page through `esc`/`html`, so a stored `<script>` renders as text.
import { redactUrl } from '../core/redact-url.js';

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;', '`': '&#96;' };

/** Escape for HTML text and quoted attribute values. */
export function esc(value: unknown): string {
  if (value === null || value === undefined) return '';
  return String(value).replace(/[&<>"'`]/g, (c) => ESCAPES[c]!);
}

/** Markup that is already safe (built by `html`), as opposed to a string that must be escaped. */
export class Safe {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

type Part = Safe | string | number | boolean | null | undefined | Part[];

function render(v: Part): string {
  if (v instanceof Safe) return v.text;
  if (Array.isArray(v)) return v.map(render).join('');
  if (v === false || v === null || v === undefined) return '';
  return esc(v);
}

/** A template tag: interpolated values are escaped unless they are Safe (nested `html`). */
export function html(strings: TemplateStringsArray, ...values: Part[]): Safe {
  let out = strings[0]!;
  for (let i = 0; i < values.length; i++) out += render(values[i]!) + strings[i + 1]!;
  return new Safe(out);
}

export interface PageContext {
  /** Prefix of every link: the mount path ('' or '/admin'). */
  base: string;
  nonce: string;
  /** Null on the login page. */
  csrf: string | null;
  /** Current path (for the nav highlight and form returns), without base. */
  path: string;
  /** Seconds between automatic reloads, or null. */
  refreshS?: number | null;
  /** A one-line result of the last action (the ?notice= of its redirect, shown only when signed for this session). */
  notice?: string | null;
  /** Shows the logout button (a session exists). */
  loggedIn?: boolean;
}

const NAV: [string, string][] = [['/', 'Overview'], ['/events', 'Events'], ['/jobs', 'Jobs'], ['/endpoints', 'Endpoints']];

export function layout(ctx: PageContext, title: string, body: Safe): string {
  const current = NAV.filter(([p]) => p === '/' ? ctx.path === '/' : ctx.path.startsWith(p)).at(-1)?.[0];
  const nav = NAV.map(([p, label]) => html`<a href="${ctx.base}${p}"${p === current ? new Safe(' aria-current="page"') : ''}>${label}</a>`);
  return '<!doctype html>' + html`<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="same-origin">
${ctx.csrf ? html`<meta name="csrf-token" content="${ctx.csrf}">` : ''}
<title>${title} · rea</title>
<style nonce="${ctx.nonce}">${new Safe(CSS)}</style>
</head><body${ctx.refreshS ? new Safe(` data-refresh="${Number(ctx.refreshS)}"`) : ''}>
<header><a class="brand" href="${ctx.base}/">rea</a><nav>${nav}</nav>
${ctx.refreshS ? html`<label class="auto"><input type="checkbox" id="auto-refresh" checked> auto-refresh ${ctx.refreshS} s</label>` : ''}
${ctx.loggedIn && ctx.csrf ? html`<form method="post" action="${ctx.base}/logout" class="logout">${hidden('_csrf', ctx.csrf)}<button type="submit" class="link">Log out</button></form>` : ''}
</header>
<main>
${ctx.notice ? html`<p class="notice" role="status">${ctx.notice}</p>` : ''}
${body}
</main>
<script nonce="${ctx.nonce}">${new Safe(SCRIPT)}</script>
</body></html>`.text;
}

export function hidden(name: string, value: string): Safe {
  return html`<input type="hidden" name="${name}" value="${value}">`;
}

/** A one-button form posting to an API route; the route redirects back to `returnTo`. */
export function actionButton(ctx: PageContext, action: string, label: string, opts: { fields?: Record<string, string | string[]>; confirm?: string; returnTo?: string; kind?: 'danger' | 'primary' } = {}): Safe {
  const fields = Object.entries(opts.fields ?? {}).flatMap(([k, v]) => (Array.isArray(v) ? v : [v]).map((x) => hidden(k, x)));
  return html`<form method="post" action="${ctx.base}${action}" class="inline"${opts.confirm ? html` data-confirm="${opts.confirm}"` : ''}>${hidden('_csrf', ctx.csrf ?? '')}${hidden('_return', opts.returnTo ?? ctx.path)}${fields}<button type="submit" class="${opts.kind ?? ''}">${label}</button></form>`;
}

export function badge(state: string): Safe {
  return html`<span class="badge s-${state.replace(/[^a-z_]/g, '')}">${state}</span>`;
}

/**
 * A job's latest error, for a list. A completed job's is an earlier attempt's (one a worker's stop
 * cut short, a failure retried): shown plain and named as such, as it is no failure of the job.
 */
export function lastJobError(j: { state: string; errors: readonly { attempt: number; message: string }[] }): Safe | '' {
  const last = j.errors.at(-1);
  if (!last) return '';
  if (j.state === 'completed') {
    return html`<span class="earlier" title="${last.message}">attempt ${last.attempt}, before it completed: ${last.message}</span>`;
  }
  return html`<code class="preview" title="${last.message}">${last.message}</code>`;
}

export function time(d: Date | string | null | undefined, nowMs = Date.now()): Safe {
  if (!d) return html`<span class="muted">-</span>`;
  const date = d instanceof Date ? d : new Date(d);
  if (Number.isNaN(date.getTime())) return html`<span class="muted">-</span>`;
  const iso = date.toISOString();
  return html`<time datetime="${iso}" title="${iso}">${relative(nowMs - date.getTime())}</time>`;
}

export function relative(ms: number): string {
  const future = ms < 0;
  const a = Math.abs(ms);
  const text = a < 1000 ? `${Math.round(a)} ms` : a < 120_000 ? `${Math.round(a / 1000)} s` : a < 7_200_000 ? `${Math.round(a / 60_000)} min`
    : a < 172_800_000 ? `${(a / 3_600_000).toFixed(1)} h` : `${(a / 86_400_000).toFixed(1)} d`;
  return future ? `in ${text}` : `${text} ago`;
}

export function duration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return '-';
  return relative(ms).replace(/ ago$/, '');
}

/** A table that turns into stacked cards on a narrow screen (each cell labelled by data-label);
 *  a compact one (two short columns) stays a table. */
export function table(headers: string[], rows: Part[][], empty = 'Nothing here.', opts: { compact?: boolean } = {}): Safe {
  if (rows.length === 0) return html`<p class="empty">${empty}</p>`;
  return html`<div class="table${opts.compact ? ' compact' : ''}"><table><thead><tr>${headers.map((h) => html`<th>${h}</th>`)}</tr></thead><tbody>${rows.map((r) => html`<tr>${r.map((c, i) => html`<td data-label="${headers[i] ?? ''}">${c}</td>`)}</tr>`)}</tbody></table></div>`;
}

export function prettyJson(value: unknown): string {
  try {
    return JSON.stringify(value, null, 2) ?? 'null';
  } catch {
    return String(value);
  }
}

// Confirm dialogs for destructive buttons and the overview's auto-refresh; nothing else runs.
const SCRIPT = `
document.addEventListener('submit', function (e) {
  var msg = e.target.getAttribute('data-confirm');
  if (msg && !window.confirm(msg)) e.preventDefault();
});
(function () {
  var s = Number(document.body.getAttribute('data-refresh'));
  var box = document.getElementById('auto-refresh');
  if (!s || !box) return;
  try { box.checked = sessionStorage.getItem('rea-auto-refresh') !== 'off'; } catch (_) {}
  box.addEventListener('change', function () { try { sessionStorage.setItem('rea-auto-refresh', box.checked ? 'on' : 'off'); } catch (_) {} });
  setInterval(function () {
    var busy = document.activeElement && /INPUT|SELECT|TEXTAREA/.test(document.activeElement.tagName) && document.activeElement !== box;
    if (box.checked && !document.hidden && !busy) location.reload();
  }, s * 1000);
})();
`;

const CSS = `
:root { --bg:#f6f7f9; --fg:#1c2330; --muted:#5d6878; --line:#dde2e8; --card:#fff; --accent:#2657c5; --bad:#b42318; --badbg:#fdecea; --warn:#9a5b00; --warnbg:#fff4e0; --ok:#1b7340; --okbg:#e7f5ec; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif; background:var(--bg); color:var(--fg); }
header { display:flex; flex-wrap:wrap; align-items:center; gap:.5rem 1.25rem; padding:.6rem 1.25rem; background:#16202e; color:#fff; }
header a { color:#cfd8e6; text-decoration:none; }
header a[aria-current] { color:#fff; border-bottom:2px solid #7aa2ff; }
header nav { display:flex; gap:1rem; flex-wrap:wrap; }
.brand { font-weight:700; color:#fff; font-size:1.1rem; letter-spacing:.02em; }
.auto { margin-left:auto; color:#cfd8e6; font-size:.85rem; }
.logout { margin:0; }
header .link { color:#cfd8e6; }
main { max-width:1240px; margin:0 auto; padding:1rem 1.25rem 3rem; }
h1 { font-size:1.35rem; margin:.4rem 0 1rem; }
h2 { font-size:1.05rem; margin:1.6rem 0 .6rem; }
a { color:var(--accent); }
.muted, .empty { color:var(--muted); }
.notice { background:var(--okbg); color:var(--ok); padding:.5rem .75rem; border-radius:6px; }
.alerts { display:grid; gap:.5rem; margin-bottom:1rem; }
.alert { background:var(--badbg); border-left:4px solid var(--bad); padding:.6rem .8rem; border-radius:6px; display:flex; flex-wrap:wrap; gap:.4rem 1rem; align-items:center; }
.alert strong { color:var(--bad); font-family:ui-monospace,Menlo,Consolas,monospace; }
.alert.warn { background:var(--warnbg); border-color:var(--warn); }
.allclear { background:var(--okbg); color:var(--ok); padding:.6rem .8rem; border-radius:6px; margin-bottom:1rem; }
.tiles { display:grid; grid-template-columns:repeat(auto-fill,minmax(180px,1fr)); gap:.75rem; }
.tile { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:.75rem .9rem; }
.tile .n { font-size:1.6rem; font-weight:650; font-variant-numeric:tabular-nums; }
.tile .l { color:var(--muted); font-size:.85rem; }
.tile.bad .n { color:var(--bad); }
.grid2 { display:grid; grid-template-columns:1fr 1fr; gap:0 1.5rem; }
.table { overflow-x:auto; background:var(--card); border:1px solid var(--line); border-radius:8px; }
table { border-collapse:collapse; width:100%; }
th, td { text-align:left; padding:.45rem .6rem; border-bottom:1px solid var(--line); vertical-align:top; }
th { font-size:.8rem; text-transform:uppercase; letter-spacing:.04em; color:var(--muted); background:#fafbfc; }
tr:last-child td { border-bottom:0; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
code, pre, .mono { font-family:ui-monospace,Menlo,Consolas,monospace; font-size:.85rem; }
.preview { max-width:28rem; overflow:hidden; text-overflow:ellipsis; white-space:nowrap; display:block; color:var(--muted); }
.earlier { max-width:28rem; overflow:hidden; text-overflow:ellipsis; white-space:nowrap; display:block; color:var(--muted); font-size:.85rem; }
pre { background:#0f1722; color:#e6edf6; padding:.8rem; border-radius:8px; overflow:auto; max-height:28rem; white-space:pre-wrap; word-break:break-word; }
pre.err { background:var(--badbg); color:var(--bad); }
dl { display:grid; grid-template-columns:max-content 1fr; gap:.3rem 1rem; background:var(--card); border:1px solid var(--line); border-radius:8px; padding:.75rem .9rem; margin:0; }
dt { color:var(--muted); }
dd { margin:0; word-break:break-all; }
.badge { display:inline-block; padding:.05rem .45rem; border-radius:999px; font-size:.78rem; background:#e8ecf2; color:#324055; white-space:nowrap; }
.s-poisoned, .s-discarded, .s-disabled, .s-failure, .s-gone, .s-refused { background:var(--badbg); color:var(--bad); }
.s-failing, .s-retryable, .s-throttled, .s-unfanned, .s-cancelled { background:var(--warnbg); color:var(--warn); }
.s-fanned, .s-completed, .s-enabled, .s-success { background:var(--okbg); color:var(--ok); }
.s-running, .s-available { background:#e6eeff; color:var(--accent); }
form.filters { display:flex; flex-wrap:wrap; gap:.5rem; align-items:flex-end; background:var(--card); border:1px solid var(--line); border-radius:8px; padding:.75rem; margin-bottom:.9rem; }
form.filters label, form.stack label { display:flex; flex-direction:column; font-size:.8rem; color:var(--muted); gap:.15rem; }
form.stack { display:grid; gap:.6rem; max-width:32rem; background:var(--card); border:1px solid var(--line); border-radius:8px; padding:.9rem; }
input, select, button { font:inherit; }
input[type=text], input[type=password], input[type=url], input:not([type]), select { padding:.35rem .5rem; border:1px solid #c4ccd6; border-radius:6px; background:#fff; min-width:9rem; }
button { padding:.35rem .75rem; border:1px solid #c4ccd6; border-radius:6px; background:#fff; cursor:pointer; }
button.primary { background:var(--accent); border-color:var(--accent); color:#fff; }
button.danger { border-color:var(--bad); color:var(--bad); }
button.link { background:none; border:0; padding:0; text-decoration:underline; }
form.inline { display:inline; margin:0 .25rem .25rem 0; }
.pager { margin-top:.75rem; display:flex; gap:1rem; }
.tabs { display:flex; flex-wrap:wrap; gap:.35rem; margin-bottom:.8rem; }
.tabs a { padding:.25rem .65rem; border-radius:999px; background:#e8ecf2; text-decoration:none; color:#324055; }
.tabs a[aria-current] { background:var(--accent); color:#fff; }
.actions { display:flex; flex-wrap:wrap; gap:.4rem; margin:.8rem 0; }
.secret { background:var(--warnbg); border:1px solid var(--warn); padding:.75rem; border-radius:8px; }
.login { max-width:24rem; margin:10vh auto; }
@media (max-width: 760px) {
  main { padding:.75rem; }
  .grid2 { grid-template-columns:1fr; }
  .auto { margin-left:0; }
  .tiles { grid-template-columns:1fr 1fr; gap:.5rem; }
  .tile .n { font-size:1.3rem; }
  .table:not(.compact) { border:0; background:none; }
  .table:not(.compact) :is(table, thead, tbody, tr, td) { display:block; width:100%; }
  .table:not(.compact) thead { display:none; }
  .table:not(.compact) tr { background:var(--card); border:1px solid var(--line); border-radius:8px; margin-bottom:.6rem; padding:.3rem 0; }
  .table:not(.compact) td { border:0; padding:.25rem .7rem; display:grid; grid-template-columns:7.5rem 1fr; gap:.5rem; }
  .table:not(.compact) td::before { content:attr(data-label); color:var(--muted); font-size:.78rem; text-transform:uppercase; }
  .preview, .earlier { max-width:100%; white-space:normal; word-break:break-all; }
  dl { grid-template-columns:1fr; }
  dt { margin-top:.4rem; }
}
`;

/**
 * The answer to a panel form that made a signing secret (add endpoint, rotate): the one time the
 * secret is shown. Never cached (every admin response is no-store), never in a URL or a notice.
 */
export function secretPage(ctx: PageContext, what: string, endpoint: { id: string; url: string }, secret: string, returnTo: string): string {
  return layout(ctx, 'Signing secret', html`<h1>${what}</h1>
<p>Endpoint <a href="${ctx.base}/endpoints/${endpoint.id}"><code>${redactUrl(endpoint.url)}</code></a></p>
<p>Its signing secret, shown <strong>this once</strong>: give it to the receiver now (it verifies the
<code>webhook-signature</code> header with it). rea keeps it, but no page, API read or CLI listing shows it again.</p>
<pre class="secret"><code>${secret}</code></pre>
<p><a href="${returnTo}">Done</a></p>`);
}
