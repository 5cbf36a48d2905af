// Trawl status page: polls status.json and renders it. Hosts, URLs and error texts come
// from crawled sites, so every value is written with textContent (never as HTML).
'use strict';
(function () {
  const REFRESH_MS = 2000;
  let renders = 0;

  function $(id) { return document.getElementById(id); }

  // Digits grouped by commas, independent of the browser's locale.
  function int(n) {
    if (n === null || n === undefined) return '–';
    return String(Math.trunc(n)).replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  }
  function rate(x) {
    if (x === null || x === undefined) return '–';
    return x >= 100 ? int(Math.round(x)) : x.toFixed(1);
  }
  function text(id, v) {
    const el = $(id);
    if (el) el.textContent = v;
  }
  function td(tr, v, cls) {
    const c = document.createElement('td');
    c.textContent = v;
    if (cls) c.className = cls;
    tr.appendChild(c);
    return c;
  }
  function fill(id, rows, cols, render) {
    const body = document.querySelector('#' + id + ' tbody');
    const trs = rows.map(function (r) {
      const tr = document.createElement('tr');
      render(tr, r);
      return tr;
    });
    if (trs.length === 0) {
      const tr = document.createElement('tr');
      const c = td(tr, 'none', 'empty');
      c.colSpan = cols;
      trs.push(tr);
    }
    body.replaceChildren.apply(body, trs);
  }
  function time(ms) {
    return new Date(ms).toISOString().slice(11, 19);
  }
  // The address a host was last requested at and its state under per-server politeness.
  function server(h, now) {
    if (!h.addr) return '–';
    if (h.addr_busy) return h.addr + ' busy';
    if (h.addr_next_ms > now) return h.addr + ' next ' + time(h.addr_next_ms);
    return h.addr;
  }

  function render(d) {
    const t = d.total;
    text('fetched', int(t.terminal.fetched));
    text('rate', rate(t.pages_per_second));
    text('queued', int(t.queued));
    text('inflight', int(t.inflight));
    text('accepted', int(t.accepted));
    text('dispatch-rate', rate(t.dispatched_per_second));
    text('failed', int(t.terminal.failed));
    text('disallowed', int(t.terminal.disallowed));
    text('out-of-scope', int(t.terminal.out_of_scope));
    text('over-budget', int(t.terminal.over_budget));
    text('active-hosts', int(t.hosts.active));
    text('ready-hosts', int(t.hosts.ready));
    text('waiting-hosts', int(t.hosts.waiting));
    text('retired-hosts', int(t.hosts.retired));
    text('expired', int(t.expired));
    const paused = d.shards.filter(function (s) { return s.paused; }).length;
    text('paused', paused === 0 ? 'no' : paused + ' of ' + d.shards.length);
    // What holds dispatch back: backpressure from a later stage, and the fetchers' capacity.
    const g = d.dispatch;
    text('held', g ? (g.held === '' ? 'nothing' : g.held) : '–');
    text('holds', g ? int(g.holds) : '–');
    text('fetch-queued', g ? int(g.fetch_queued) + ' / ' + int(g.fetch_queued_limit) : '–');
    text('fetch-busy', g ? int(g.fetch_busy) : '–');
    text('parser-backlog', g ? int(g.parser_backlog) : '–');
    // The recrawl backlog, in adaptive mode only; its figures come from a sample of schedules.
    const rc = d.recrawl;
    document.querySelectorAll('.recrawl').forEach(function (el) { el.hidden = !rc; });
    if (rc) {
      const secs = function (ns) { return Math.round(ns / 1e9) + ' s'; };
      text('recrawl-scheduled', int(rc.scheduled));
      text('recrawl-due', int(rc.due) + ' (' + secs(rc.oldest_due_ns) + ')');
      text('recrawl-interval', secs(rc.median_interval_ns));
      text('recrawl-304', (100 * rc.not_modified_share).toFixed(0) + ' %');
    }

    const most = Math.max.apply(null, [1].concat(t.frontier));
    fill('priorities', t.frontier.map(function (n, p) { return { p: p, n: n }; }), 3, function (tr, r) {
      td(tr, String(r.p));
      td(tr, int(r.n), 'n');
      const cell = td(tr, '');
      if (r.n > 0) {
        const bar = document.createElement('div');
        bar.className = 'bar';
        bar.style.width = (100 * r.n / most).toFixed(1) + '%';
        cell.appendChild(bar);
      }
    });

    fill('shards', d.shards, 8, function (tr, s) {
      td(tr, String(s.shard) + (s.served ? ' ●' : '')).title = s.served ? 'served by this process' : '';
      td(tr, int(s.accepted), 'n');
      td(tr, int(s.queued), 'n');
      td(tr, int(s.inflight), 'n');
      td(tr, int(s.terminal.fetched), 'n');
      td(tr, int(s.terminal.failed), 'n');
      td(tr, rate(s.pages_per_second), 'n');
      td(tr, s.paused ? 'paused' : 'running');
    });
    d.unavailable.forEach(function (u) {
      const tr = document.createElement('tr');
      td(tr, String(u.shard));
      const c = td(tr, 'unavailable: ' + u.error, 'err');
      c.colSpan = 7;
      document.querySelector('#shards tbody').appendChild(tr);
    });

    fill('busiest', d.busiest, 5, function (tr, h) {
      td(tr, h.host, 'host');
      td(tr, int(h.fetched), 'n');
      td(tr, int(h.avg_ms), 'n');
      td(tr, String(h.shard), 'n');
      td(tr, server(h, Date.now()), 'host');
    });
    fill('slowest', d.slowest, 5, function (tr, h) {
      td(tr, h.host, 'host');
      td(tr, int(h.avg_ms), 'n');
      td(tr, int(h.last_ms), 'n');
      td(tr, int(h.fetched), 'n');
      td(tr, server(h, Date.now()), 'host');
    });
    fill('stuck', d.stuck || [], 6, function (tr, k) {
      tr.className = 'failed';
      td(tr, k.host, 'host');
      td(tr, k.url, 'url');
      td(tr, String(k.attempt), 'n');
      td(tr, k.since_ms ? Math.round((d.now_ms - k.since_ms) / 1000) + ' s' : '', 'n');
      td(tr, k.overdue ? 'overdue by ' + Math.round((d.now_ms - k.deadline_ms) / 1000) + ' s' : 'ends in ' + Math.round((k.deadline_ms - d.now_ms) / 1000) + ' s');
      td(tr, k.error ? k.error + ' (' + k.error_tries + ' tries)' : 'none reported', 'err');
    });
    // The live site policies: a crawl may hold thousands of rules; the page gets the most
    // active and the count.
    const ru = d.rules;
    if (ru) {
      text('rules-sub', int(ru.total) + ' rules in force (version ' + int(ru.version) + ')' +
        (ru.shown.length < ru.total ? ', the ' + int(ru.shown.length) + ' most active shown' : '') +
        '; counters summed over shards');
    } else {
      text('rules-sub', d.rules_error ? 'unavailable: ' + d.rules_error : 'not shown');
    }
    fill('rules', ru ? ru.shown : [], 6, function (tr, r) {
      if (r.parked > 0) tr.className = 'failed';
      td(tr, r.scope, 'host');
      td(tr, int(r.hosts), 'n');
      td(tr, int(r.requests), 'n');
      td(tr, int(r.blocked), 'n');
      td(tr, int(r.parked), 'n');
      td(tr, int(r.excluded), 'n');
    });
    fill('errors', d.errors, 7, function (tr, e) {
      tr.className = e.result;
      td(tr, time(e.t_ms));
      td(tr, e.result, 'result');
      td(tr, e.kind);
      td(tr, e.status ? String(e.status) : '', 'n');
      td(tr, e.host, 'host');
      td(tr, e.url, 'url');
      td(tr, e.error, 'err');
    });

    const spark = $('history');
    const top = Math.max.apply(null, [1].concat(d.history.map(function (p) { return p.pages_per_second; })));
    spark.replaceChildren.apply(spark, d.history.map(function (p) {
      const b = document.createElement('div');
      b.style.height = (100 * p.pages_per_second / top).toFixed(1) + '%';
      b.title = rate(p.pages_per_second) + ' pages/s at ' + time(p.t_ms);
      return b;
    }));

    text('updated', 'updated ' + time(d.now_ms) + ' UTC');
    renders++;
    document.body.dataset.renders = String(renders);
  }

  // why is the server's reason (status.json's error), shown on hover.
  function live(ok, msg, why) {
    const s = $('state');
    s.textContent = msg;
    s.title = why || '';
    s.className = 'pill ' + (ok ? 'live' : 'down');
    document.body.classList.toggle('stale', !ok);
  }

  async function refresh() {
    try {
      const resp = await fetch('status.json', { cache: 'no-store' });
      const d = await resp.json();
      if (!resp.ok && !d.total) {
        // Nothing could be read: the last numbers stay on screen, dimmed, rather than
        // zeros that never were.
        live(false, 'Redis unavailable', d.error);
        return;
      }
      render(d);
      if (d.unavailable.length > 0) {
        live(false, d.unavailable.length + ' shard(s) unavailable', d.error);
      } else {
        live(true, 'live');
      }
    } catch (e) {
      live(false, 'scheduler unreachable');
    } finally {
      setTimeout(refresh, REFRESH_MS);
    }
  }

  refresh();
})();
