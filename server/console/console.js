// The usage console (GET /console): reads GET /v1/credits/balance, GET /v1/usage and
// GET /v1/payments with the key the user pastes, which stays in this tab's session storage.
// Every value from the API reaches the page as text (textContent), never as markup.
'use strict';
(function consoleApp() {
  const STORAGE_KEY = 'prs.console.apiKey';
  const REFRESH_MS = 5000;
  const SVG = 'http://www.w3.org/2000/svg';
  const byId = (id) => document.getElementById(id);
  const state = { cursor: null, loading: false };

  function storedKey() {
    return sessionStorage.getItem(STORAGE_KEY) ?? '';
  }

  /** micro-USDC (a decimal string) as USDC text, exactly. */
  function usdc(micro) {
    if (micro === null || micro === undefined) return '';
    const digits = String(micro).padStart(7, '0');
    const whole = digits.slice(0, -6);
    const fraction = digits.slice(-6).replace(/0+$/, '');
    return `${whole}${fraction ? `.${fraction}` : ''} USDC`;
  }

  function creditsText(credits) {
    return `${Number(credits).toLocaleString('en-US')} credits`;
  }

  function element(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }

  async function api(path) {
    const response = await fetch(path, { headers: { 'x-api-key': storedKey() }, cache: 'no-store' });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) {
      const reason = body.details ?? body.error ?? `HTTP ${response.status}`;
      throw new Error(`${path.split('?')[0]}: ${reason}`);
    }
    return body;
  }

  function showError(error) {
    const node = byId('error');
    node.textContent = error ? String(error.message ?? error) : '';
    node.hidden = !error;
  }

  function renderBalance(balance) {
    byId('balance').textContent = creditsText(balance.effective_available);
    byId('balance-usdc').textContent = usdc(String(BigInt(balance.effective_available) * 1000n));
    byId('key-prefix').textContent = balance.key_prefix;
    byId('daily-cap').textContent = creditsText(balance.daily_cap);
    byId('daily-spent').textContent = creditsText(balance.daily_spent);
    byId('daily-remaining').textContent = creditsText(balance.daily_remaining);
  }

  function renderChart(days) {
    const chart = byId('spend-chart');
    chart.replaceChildren();
    const width = 760;
    const height = 200;
    const bottom = 24;
    const max = Math.max(1, ...days.map((day) => day.credits));
    const slot = width / Math.max(1, days.length);
    chart.setAttribute('viewBox', `0 0 ${width} ${height}`);
    const axis = document.createElementNS(SVG, 'line');
    axis.setAttribute('x1', '0');
    axis.setAttribute('x2', String(width));
    axis.setAttribute('y1', String(height - bottom));
    axis.setAttribute('y2', String(height - bottom));
    axis.setAttribute('stroke', '#8c959f');
    chart.append(axis);
    days.forEach((day, index) => {
      const barHeight = ((height - bottom - 16) * day.credits) / max;
      const bar = document.createElementNS(SVG, 'rect');
      bar.setAttribute('x', String(index * slot + slot * 0.15));
      bar.setAttribute('width', String(Math.max(1, slot * 0.7)));
      bar.setAttribute('y', String(height - bottom - barHeight));
      bar.setAttribute('height', String(barHeight));
      bar.setAttribute('fill', '#1f6feb');
      bar.setAttribute('data-day', day.day);
      bar.setAttribute('data-credits', String(day.credits));
      const title = document.createElementNS(SVG, 'title');
      title.textContent = `${day.day}: ${creditsText(day.credits)}, ${usdc(day.amount_micro_usdc)} paid to targets, ${day.payments} payments`;
      bar.append(title);
      chart.append(bar);
      const labelEvery = Math.ceil(days.length / 10);
      if (index % labelEvery === 0 || index === days.length - 1) {
        const label = document.createElementNS(SVG, 'text');
        label.setAttribute('x', String(index === 0 ? 0 : index === days.length - 1 ? width : index * slot + slot / 2));
        label.setAttribute('y', String(height - 6));
        label.setAttribute('font-size', '11');
        label.setAttribute('text-anchor', index === 0 ? 'start' : index === days.length - 1 ? 'end' : 'middle');
        label.setAttribute('fill', '#57606a');
        label.textContent = day.day.slice(5);
        chart.append(label);
      }
    });
    const peak = document.createElementNS(SVG, 'text');
    peak.setAttribute('x', '4');
    peak.setAttribute('y', '12');
    peak.setAttribute('font-size', '11');
    peak.setAttribute('fill', '#57606a');
    peak.textContent = `max ${creditsText(max)} a day`;
    chart.append(peak);
  }

  /** The two breakdown tables (by key, by target host): one template, its first column named by its section. */
  function buildBreakdowns() {
    const template = byId('breakdown');
    for (const section of document.querySelectorAll('section[data-breakdown]')) {
      const table = template.content.cloneNode(true);
      table.querySelector('th').textContent = section.dataset.name;
      table.querySelector('tbody').id = section.dataset.breakdown;
      section.append(table);
    }
  }

  function renderBuckets(tbodyId, rows, name) {
    const body = byId(tbodyId);
    body.replaceChildren();
    if (rows.length === 0) {
      const row = element('tr');
      const cell = element('td', 'Nothing spent in this range.', 'muted');
      cell.colSpan = 5;
      row.append(cell);
      body.append(row);
      return;
    }
    for (const bucket of rows) {
      const row = element('tr');
      row.append(
        element('td', name(bucket)),
        element('td', bucket.payments, 'num'),
        element('td', bucket.credits.toLocaleString('en-US'), 'num'),
        element('td', usdc(bucket.amount_micro_usdc), 'num'),
        element('td', `${bucket.released_payments} / ${bucket.pending_payments}`, 'num'),
      );
      body.append(row);
    }
  }

  function renderUsage(usage) {
    byId('range').textContent = `${usage.from} to ${usage.to} (UTC)`;
    byId('total-credits').textContent = creditsText(usage.totals.credits);
    byId('total-usdc').textContent = usdc(usage.totals.amount_micro_usdc);
    byId('total-payments').textContent = String(usage.totals.payments);
    renderChart(usage.by_day);
    renderBuckets('by-key', usage.by_key, (bucket) => bucket.key_prefix);
    renderBuckets('by-host', usage.by_host, (bucket) => bucket.host);
  }

  function paymentRow(item) {
    const row = element('tr');
    row.dataset.id = item.id;
    const target = item.target ? `${item.target.origin}${item.target.path}` : '';
    const tx = element('td');
    if (item.tx_hash && item.explorer_url) {
      const link = element('a', `${item.tx_hash.slice(0, 10)}…`);
      link.href = item.explorer_url;
      link.target = '_blank';
      link.rel = 'noopener noreferrer';
      link.title = item.tx_hash;
      tx.append(link);
    } else if (item.tx_hash) {
      const code = element('code', `${item.tx_hash.slice(0, 10)}…`);
      code.title = item.tx_hash;
      tx.append(code);
    }
    row.append(
      element('td', new Date(item.created_at).toLocaleString()),
      element('td', item.status, `status-${item.status}`),
      element('td', item.kind === 'proxy_payment' ? 'proxy' : item.kind),
      element('td', item.key_prefix ?? ''),
      element('td', target),
      element('td', item.network ?? ''),
      element('td', usdc(item.amount_micro_usdc), 'num amount'),
      element('td', item.credits.toLocaleString('en-US'), 'num'),
      element('td', usdc(item.fee_micro_usdc), 'num'),
      tx,
      element('td', item.webhook_id ?? ''),
    );
    return row;
  }

  function historyQuery(cursor) {
    const params = new URLSearchParams({ limit: '50' });
    const status = byId('filter-status').value;
    const host = byId('filter-host').value.trim();
    if (status) params.set('status', status);
    if (host) params.set('host', host);
    if (cursor) params.set('cursor', cursor);
    return `/v1/payments?${params.toString()}`;
  }

  async function loadHistory(more) {
    const page = await api(historyQuery(more ? state.cursor : null));
    const body = byId('payments');
    if (!more) body.replaceChildren();
    for (const item of page.items) body.append(paymentRow(item));
    if (!more && page.items.length === 0) {
      const row = element('tr');
      const cell = element('td', 'No payments yet.', 'muted');
      cell.colSpan = 11;
      row.append(cell);
      body.append(row);
    }
    state.cursor = page.next_cursor;
    byId('more').hidden = page.next_cursor === null;
  }

  async function refresh() {
    if (!storedKey() || state.loading) return;
    state.loading = true;
    try {
      const [balance, usage] = await Promise.all([api('/v1/credits/balance'), api('/v1/usage')]);
      renderBalance(balance);
      renderUsage(usage);
      await loadHistory(false);
      byId('dashboard').hidden = false;
      byId('updated').textContent = `updated ${new Date().toLocaleTimeString()}`;
      showError(null);
    } catch (error) {
      showError(error);
    } finally {
      state.loading = false;
    }
  }

  function showSignedIn() {
    const signedIn = storedKey() !== '';
    byId('forget').hidden = !signedIn;
    if (!signedIn) byId('dashboard').hidden = true;
  }

  byId('key-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const key = byId('api-key').value.trim();
    if (!key) return;
    sessionStorage.setItem(STORAGE_KEY, key);
    byId('api-key').value = '';
    showSignedIn();
    void refresh();
  });
  byId('forget').addEventListener('click', () => {
    sessionStorage.removeItem(STORAGE_KEY);
    showSignedIn();
  });
  byId('refresh').addEventListener('click', () => void refresh());
  byId('filters').addEventListener('submit', (event) => {
    event.preventDefault();
    loadHistory(false).catch(showError);
  });
  byId('more').addEventListener('click', () => {
    loadHistory(true).catch(showError);
  });
  setInterval(() => {
    if (document.visibilityState === 'visible') void refresh();
  }, REFRESH_MS);
  buildBreakdowns();
  showSignedIn();
  void refresh();
})();
