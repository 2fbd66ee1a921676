import pg from 'pg';
const orig = pg.Client.prototype.query;
const counts = new Map();
pg.Client.prototype.query = function (q, ...rest) {
  const text = typeof q === 'string' ? q : q?.text ?? q?.name ?? '?';
  const k = String(text).replace(/\s+/g, ' ').slice(0, 70);
  counts.set(k, (counts.get(k) ?? 0) + 1);
  return orig.call(this, q, ...rest);
};
process.on('exit', () => { for (const [k, v] of [...counts].sort((a, b) => b[1] - a[1]).slice(0, 25)) console.log(String(v).padStart(7), k); });
