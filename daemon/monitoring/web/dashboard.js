// prefixd dashboard: polls GET /v1/cache/history (every second) and GET
// /v1/cache/prefixes (every two seconds), draws uPlot charts (or tables when
// uPlot was not bundled) and pins/unpins prefixes through
// POST /v1/cache/prefixes/pin|unpin. The API key, when the daemon has one,
// lives in sessionStorage and goes out as a Bearer header.
(function () {
  'use strict';
  const KEY_STORAGE = 'prefixd.apiKey';
  const MAX_SAMPLES = 600;   // 10 minutes at one sample per second
  const RATIO_WINDOW = 10;   // samples in the rolling hit-ratio window
  const COLORS = { device: '#2f6fde', host: '#16a37f', disk: '#c7841a', remote: '#b5479b', miss: '#d64545',
                   a: '#7b4fd6', b: '#2aa6c9', c: '#8a8f99' };
  const hasCharts = typeof window.uPlot === 'function';
  const state = { since: 0, samples: [], totals: null, charts: {}, prefixes: [], tick: 0,
                  inflight: false };

  const $ = (sel) => document.querySelector(sel);
  const fmtInt = (v) => (v == null ? '–' : Math.round(v).toLocaleString('en-US'));
  const fmtPct = (v) => (v == null ? '–' : (100 * v).toFixed(1) + ' %');

  function authHeaders() {
    const key = sessionStorage.getItem(KEY_STORAGE);
    return key ? { Authorization: 'Bearer ' + key } : {};
  }

  function setStatus(text, isError) {
    const el = $('#status');
    el.textContent = text;
    el.classList.toggle('error', !!isError);
  }

  async function api(path, init) {
    init = init || {};
    const headers = Object.assign({}, init.headers || {}, authHeaders());
    const res = await fetch(path, Object.assign({}, init, { headers, cache: 'no-store' }));
    let body = null;
    try { body = await res.json(); } catch (e) { body = null; }
    if (res.status === 401) {
      $('#key-form').hidden = false;
      throw new Error('the API key is missing or wrong');
    }
    if (!res.ok) {
      throw new Error((body && body.error && body.error.message) || ('HTTP ' + res.status));
    }
    return body;
  }

  // ---- series -------------------------------------------------------------

  // Prompt tokens reused from every tier (the remote tier only with one).
  function cachedTotal(c) { return c.device + c.host + c.disk + (c.remote || 0); }

  function perSecond(s, v) { return s.interval_ms > 0 ? v * 1000 / s.interval_ms : null; }

  function buildSeries() {
    const S = state.samples;
    const t = S.map((s) => s.t_ms / 1000);
    const hit = { device: [], host: [], disk: [], remote: [], miss: [] };
    for (let i = 0; i < S.length; i++) {
      let p = 0, d = 0, h = 0, k = 0, r = 0;
      for (let j = Math.max(0, i - RATIO_WINDOW + 1); j <= i; j++) {
        p += S[j].prompt_tokens;
        d += S[j].cached_tokens.device;
        h += S[j].cached_tokens.host;
        k += S[j].cached_tokens.disk;
        r += S[j].cached_tokens.remote || 0;
      }
      const ok = p > 0;
      hit.device.push(ok ? d / p : null);
      hit.host.push(ok ? h / p : null);
      hit.disk.push(ok ? k / p : null);
      hit.remote.push(ok ? r / p : null);
      hit.miss.push(ok ? Math.max(0, p - d - h - k - r) / p : null);
    }
    const pct = (o) => (o.capacity_bytes > 0 ? (100 * o.used_bytes) / o.capacity_bytes : null);
    const cached = (s) => cachedTotal(s.cached_tokens);
    return {
      hit: [t, hit.device, hit.host, hit.disk, hit.remote, hit.miss],
      tokens: [t, S.map((s) => perSecond(s, cached(s))), S.map((s) => perSecond(s, s.prefill_tokens))],
      ttft: [t, S.map((s) => s.ttft_ms.hit_p50), S.map((s) => s.ttft_ms.hit_p95),
             S.map((s) => s.ttft_ms.miss_p50), S.map((s) => s.ttft_ms.miss_p95)],
      occupancy: [t, S.map((s) => pct(s.occupancy.device)), S.map((s) => pct(s.occupancy.host)),
                  S.map((s) => pct(s.occupancy.disk))],
      traffic: [t, S.map((s) => perSecond(s, s.evictions.device)), S.map((s) => perSecond(s, s.evictions.host)),
                S.map((s) => perSecond(s, s.evictions.disk)), S.map((s) => perSecond(s, s.onboard_blocks)),
                S.map((s) => perSecond(s, s.offload_blocks))],
      requests: [t, S.map((s) => s.running), S.map((s) => s.waiting)],
      // Models with state snapshots only (samples without them: gaps).
      snapshots: [t, S.map((s) => (s.snapshots ? perSecond(s, s.snapshots.hits) : null)),
                  S.map((s) => (s.snapshots ? perSecond(s, s.snapshots.tier_hits) : null)),
                  S.map((s) => (s.snapshots ? perSecond(s, s.snapshots.misses) : null))],
    };
  }

  const CHARTS = {
    hit: { el: '#chart-hit', y: { range: [0, 1] }, fmt: fmtPct,
           series: [['device', COLORS.device], ['host', COLORS.host], ['disk', COLORS.disk], ['remote', COLORS.remote],
                    ['miss', COLORS.miss]] },
    tokens: { el: '#chart-tokens', fmt: fmtInt,
              series: [['saved (cached)', COLORS.device], ['computed (prefill)', COLORS.miss]] },
    ttft: { el: '#chart-ttft', fmt: (v) => (v == null ? '–' : v.toFixed(1) + ' ms'),
            series: [['hit p50', COLORS.device], ['hit p95', COLORS.b], ['miss p50', COLORS.miss], ['miss p95', COLORS.disk]] },
    occupancy: { el: '#chart-occupancy', y: { range: [0, 100] }, fmt: (v) => (v == null ? '–' : v.toFixed(1) + ' %'),
                 series: [['device', COLORS.device], ['host', COLORS.host], ['disk', COLORS.disk]] },
    traffic: { el: '#chart-traffic', fmt: (v) => (v == null ? '–' : v.toFixed(1)),
               series: [['evict device', COLORS.device], ['evict host', COLORS.host], ['evict disk', COLORS.disk],
                        ['onboard', COLORS.a], ['offload', COLORS.c]] },
    requests: { el: '#chart-requests', fmt: fmtInt,
                series: [['running', COLORS.device], ['waiting', COLORS.disk]] },
    // Drawn only for a model with state snapshots (recurrent layers).
    snapshots: { el: '#chart-snapshots', fmt: (v) => (v == null ? '–' : v.toFixed(2)), onlyWithSnapshots: true,
                 series: [['hits', COLORS.device], ['from tiers', COLORS.host], ['misses', COLORS.miss]] },
  };

  function plotWidth(container) { return Math.max(240, container.clientWidth - 4); }

  function makeChart(name, data) {
    const def = CHARTS[name];
    const container = $(def.el + ' .plot');
    const opts = {
      width: plotWidth(container),
      height: 200,
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true }, y: def.y ? { range: def.y.range } : { auto: true } },
      axes: [{}, { size: 56, values: (u, vals) => vals.map((v) => (def.y && def.y.range[1] === 1 ? (100 * v).toFixed(0) + '%' : v)) }],
      series: [{}].concat(def.series.map(([label, stroke]) => ({
        label, stroke, width: 1.5, spanGaps: false, value: (u, v) => def.fmt(v) }))),
    };
    return new window.uPlot(opts, data, container);
  }

  function chartTable(name, data) {
    // Tables-only mode: the last five samples of each series.
    const def = CHARTS[name];
    const n = data[0].length;
    const rows = [];
    for (let i = Math.max(0, n - 5); i < n; i++) {
      const cells = def.series.map((_, k) => '<td class="num">' + def.fmt(data[k + 1][i]) + '</td>').join('');
      rows.push('<tr><td>' + new Date(data[0][i] * 1000).toLocaleTimeString() + '</td>' + cells + '</tr>');
    }
    const head = '<tr><th>time</th>' + def.series.map(([l]) => '<th class="num">' + l + '</th>').join('') + '</tr>';
    $(def.el + ' .plot').innerHTML = '<table><thead>' + head + '</thead><tbody>' + rows.reverse().join('') + '</tbody></table>';
  }

  function render() {
    const series = buildSeries();
    const withSnapshots = !!(state.totals && state.totals.snapshots);
    for (const name of Object.keys(CHARTS)) {
      const data = series[name];
      const el = $(CHARTS[name].el);
      if (CHARTS[name].onlyWithSnapshots) {
        el.hidden = !withSnapshots;
        if (!withSnapshots) continue;
      }
      let points = 0;
      for (let k = 1; k < data.length; k++) points += data[k].filter((v) => v != null).length;
      el.dataset.points = String(points);
      el.dataset.samples = String(data[0].length);
      if (hasCharts) {
        if (!state.charts[name]) state.charts[name] = makeChart(name, data);
        else state.charts[name].setData(data);
      } else {
        chartTable(name, data);
      }
    }
    const T = state.totals;
    if (T) {
      const cached = cachedTotal(T.cached_tokens);
      $('#tile-hit-ratio').textContent = T.prompt_tokens > 0 ? fmtPct(cached / T.prompt_tokens) : '–';
      $('#tile-saved').textContent = fmtInt(cached);
      $('#tile-computed').textContent = fmtInt(T.prefill_tokens);
      $('#tile-requests').textContent = fmtInt(T.requests_hit) + ' / ' + fmtInt(T.requests_miss);
      $('#tile-bytes-per-token').textContent =
        T.bytes_per_cached_token == null ? '–' : fmtInt(T.bytes_per_cached_token) + ' B';
      // Only for a model with state snapshots: admissions resumed from one (of them, from the
      // tiers) and with cached blocks but no snapshot; slots holding one of all.
      $('#tile-snapshots-box').hidden = !T.snapshots;
      $('#tile-snapshot-slots-box').hidden = !T.snapshots;
      if (T.snapshots) {
        $('#tile-snapshots').textContent = fmtInt(T.snapshots.hits) + ' (' + fmtInt(T.snapshots.tier_hits) +
          ') / ' + fmtInt(T.snapshots.misses);
        $('#tile-snapshot-slots').textContent = fmtInt(T.snapshots.stored) + ' / ' + fmtInt(T.snapshots.slots);
      }
      // Only with a remote tier: its servers in the ring and the blocks lookups found there.
      $('#tile-remote-box').hidden = !T.remote;
      if (T.remote) {
        $('#tile-remote').textContent = T.remote.servers_in_ring + ' / ' + T.remote.servers + ' · ' +
          fmtInt(T.remote.lookup_hits);
      }
    }
    const last = state.samples[state.samples.length - 1];
    if (last) {
      $('#tile-running').textContent = last.running + ' / ' + last.waiting;
      $('#tile-pinned').textContent = fmtInt(last.pinned_blocks);
    }
  }

  // ---- prefix table ---------------------------------------------------------

  function escapeHtml(s) {
    return String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
  }

  function age(ms) {
    if (ms < 1000) return 'now';
    if (ms < 60000) return Math.round(ms / 1000) + ' s ago';
    if (ms < 3600000) return Math.round(ms / 60000) + ' min ago';
    return Math.round(ms / 3600000) + ' h ago';
  }

  function renderPrefixes() {
    const tbody = $('#prefix-table tbody');
    if (state.prefixes.length === 0) {
      tbody.innerHTML = '<tr class="empty"><td colspan="8">no prefixes yet</td></tr>';
      return;
    }
    tbody.innerHTML = state.prefixes.map((p) => {
      const preview = p.preview == null ? '(token ids)' : p.preview.replace(/\s+/g, ' ');
      const resident = p.resident.device_tokens + p.resident.host_tokens + p.resident.disk_tokens +
        (p.resident.remote_tokens || 0);
      return '<tr data-prefix-id="' + p.id + '" data-pinned="' + p.pinned + '" data-tokens="' + p.tokens + '">' +
        '<td><code>' + p.id + '</code></td>' +
        '<td class="preview" title="' + escapeHtml(preview) + '">' + escapeHtml(preview.slice(0, 120)) + '</td>' +
        '<td class="num">' + p.tokens + '</td>' +
        '<td class="num">' + p.hits + ' / ' + p.requests + '</td>' +
        '<td><span class="tier ' + p.tier + '">' + p.tier + '</span> ' +
          (p.tier === 'none' ? '' : Math.round((100 * resident) / Math.max(1, p.tokens)) + ' %') + '</td>' +
        '<td class="' + (p.pinned ? 'pinned-yes' : '') + '">' + (p.pinned ? 'pinned' : 'no') +
          (p.prefetches > 0 ? ' · prefetched ×' + p.prefetches : '') + '</td>' +
        '<td>' + age(p.last_use_age_ms) + '</td>' +
        '<td><button type="button" data-action="' + (p.pinned ? 'unpin' : 'pin') + '" data-id="' + p.id + '">' +
          (p.pinned ? 'Unpin' : 'Pin') + '</button></td></tr>';
    }).join('');
  }

  function seconds(s) {
    if (s < 120) return Math.max(0, Math.round(s)) + ' s';
    if (s < 7200) return Math.round(s / 60) + ' min';
    return Math.round(s / 3600) + ' h';
  }

  function renderTtlPins(pins) {
    const tbody = $('#ttl-pin-table tbody');
    if (!pins || pins.length === 0) {
      tbody.innerHTML = '<tr class="empty"><td colspan="6">no TTL pins</td></tr>';
      return;
    }
    tbody.innerHTML = pins.map((p) => {
      const preview = p.preview == null ? '(token ids)' : p.preview.replace(/\s+/g, ' ');
      return '<tr data-ttl="' + escapeHtml(p.ttl) + '">' +
        '<td class="preview" title="' + escapeHtml(preview) + '">' + escapeHtml(preview.slice(0, 120)) + '</td>' +
        '<td class="num">' + p.tokens + '</td>' +
        '<td>' + escapeHtml(p.ttl) + '</td>' +
        '<td class="num">' + seconds(p.expires_in_s) + '</td>' +
        '<td class="num">' + p.hits + '</td>' +
        '<td>' + (p.tenant == null ? '' : escapeHtml(p.tenant)) + '</td></tr>';
    }).join('');
  }

  async function pollPrefixes() {
    const body = await api('/v1/cache/prefixes?limit=20');
    state.prefixes = body.prefixes;
    renderPrefixes();
    renderTtlPins(body.ttl_pins);
  }

  async function pinAction(id, action) {
    try {
      await api('/v1/cache/prefixes/' + action, {
        method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ id }) });
      await pollPrefixes();
      setStatus(action === 'pin' ? 'pinned ' + id : 'unpinned ' + id, false);
    } catch (e) {
      setStatus(action + ' failed: ' + e.message, true);
    }
  }

  // ---- loop -------------------------------------------------------------------

  async function tick() {
    if (state.inflight) return;
    state.inflight = true;
    try {
      const body = await api('/v1/cache/history?since=' + state.since);
      for (const s of body.samples) state.samples.push(s);
      if (state.samples.length > MAX_SAMPLES) state.samples.splice(0, state.samples.length - MAX_SAMPLES);
      if (state.samples.length) state.since = state.samples[state.samples.length - 1].t_ms;
      state.totals = body.totals;
      render();
      if (state.tick++ % 2 === 0) await pollPrefixes();
      setStatus('updated ' + new Date().toLocaleTimeString() + ' · ' + state.samples.length + ' samples', false);
      $('#key-form').hidden = true;
    } catch (e) {
      setStatus('error: ' + e.message, true);
    } finally {
      state.inflight = false;
    }
  }

  function start() {
    $('#no-charts').hidden = hasCharts;
    $('#key-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      sessionStorage.setItem(KEY_STORAGE, $('#key-input').value);
      tick();
    });
    $('#prefix-table').addEventListener('click', (ev) => {
      const b = ev.target.closest('button[data-action]');
      if (b) pinAction(b.dataset.id, b.dataset.action);
    });
    window.addEventListener('resize', () => {
      for (const name of Object.keys(state.charts)) {
        const c = $(CHARTS[name].el + ' .plot');
        state.charts[name].setSize({ width: plotWidth(c), height: 200 });
      }
    });
    // For tests and the curious: what the page currently holds.
    window.prefixdDashboard = { state, hasCharts, refresh: tick };
    tick();
    setInterval(tick, 1000);
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
