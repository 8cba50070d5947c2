// The operator's console (GET /ui) in a real browser: Debian's Chromium,
// headless, driven by puppeteer-core (no browser download). Run by
// tests/e2e/console_e2e_test.cc against a kvgov with two simulated engines:
//
//   node console_browser.mjs BASE_URL FLEET_TOKEN TENANT_TOKEN SCREENSHOT_DIR PROMPT_WORDS
//
// Every figure the page shows is checked against the API's own answer to
// the same token. Prints one JSON line of what it saw and exits 0, or
// names the first check that failed and exits 1.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import puppeteer from 'puppeteer-core';

const [base, fleetToken, tenantToken, shots, promptWords] = process.argv.slice(2);
const seen = {};
const WAIT = { timeout: 15000 };

async function api(token, route, body) {
  const response = await fetch(base + route, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { Authorization: 'Bearer ' + token, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, json: text ? JSON.parse(text) : null };
}

const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'kvgov-console-chromium-'));
// The flags keep Chromium off the network it has no business with (this
// machine refuses it): no background fetches, updates, sync or QUIC.
const browser = await puppeteer.launch({
  executablePath: '/usr/bin/chromium',
  headless: true,
  userDataDir: profile,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const page = await browser.newPage();
try {
  await page.setViewport({ width: 1280, height: 900 });
  const failures = [];
  page.on('pageerror', (error) => failures.push('page error: ' + error.message));
  page.on('console', (message) => {
    if (message.type() === 'error' && !/status of 40[13]/.test(message.text())) {
      failures.push('console error: ' + message.text());
    }
  });
  const requested = [];
  page.on('request', (request) => requested.push(request.url()));
  page.on('response', (response) => {
    if (response.status() === 404) failures.push('404 for ' + response.url());
  });

  // Without a token the page says one is needed.
  await page.goto(base + '/ui/', { waitUntil: 'load' });
  await page.waitForFunction(() => /needs a token/.test(document.getElementById('error').textContent), WAIT);

  // Log in; the fleet shows every worker with the blocks the API reports.
  await page.type('#token', fleetToken);
  await page.click('#login button[type="submit"]');
  const workers = (await api(fleetToken, '/v1/workers')).json.workers;
  await page.waitForFunction((n) => document.querySelectorAll('#workers tbody tr[data-worker]').length === n,
    WAIT, workers.length);
  for (const worker of workers) {
    const total = Object.values(worker.blocks).reduce((a, b) => a + b, 0);
    await page.waitForFunction((id, text) => {
      const row = document.querySelector(`#workers tr[data-worker="${id}"]`);
      return row && row.textContent.includes(text);
    }, WAIT, worker.id, total + ' blocks');
  }
  // The bars share one scale: the largest worker fills the track, the others
  // in proportion to their blocks (not each its own full-length share).
  const bars = await page.evaluate(() => [...document.querySelectorAll('#workers tr[data-worker]')].map((row) => {
    const bar = row.querySelector('.bar');
    return {
      id: row.dataset.worker,
      blocks: parseInt(row.querySelector('.tiers .count').textContent, 10),
      spans: bar.children.length,
      filled: [...bar.children].reduce((sum, span) => sum + span.getBoundingClientRect().width, 0),
      track: bar.getBoundingClientRect().width,
    };
  }));
  const largest = Math.max(...bars.map((b) => b.blocks));
  for (const b of bars) {
    const expected = b.track * b.blocks / largest;
    // Each tier's span is at least 2px wide, so a sliver may draw a little long.
    assert.ok(Math.abs(b.filled - expected) <= 1 + 2 * b.spans,
      `bar of ${b.id}: ${b.filled}px of ${b.track}px for ${b.blocks} of ${largest} blocks`);
  }
  seen.bar_fill = bars.map((b) => +(b.filled / b.track).toFixed(3));
  seen.workers = workers.map((w) => w.id);
  seen.hbm_blocks = workers.map((w) => w.blocks.hbm);
  assert.ok(seen.hbm_blocks.some((n) => n > 0), 'the warmed engine holds blocks: ' + JSON.stringify(workers));
  const stored = await page.evaluate(() => sessionStorage.getItem('kvgov.token'));
  assert.equal(stored, fleetToken, 'the token lives in sessionStorage');
  assert.ok(!page.url().includes(fleetToken), 'never in the URL');
  await page.screenshot({ path: path.join(shots, 'fleet.png'), fullPage: true });

  // Keyboard: the arrow key moves to the next tab.
  await page.focus('#tab-fleet');
  await page.keyboard.press('ArrowRight');
  await page.waitForFunction(() => document.getElementById('tab-traffic').getAttribute('aria-selected') === 'true', WAIT);

  // Traffic: routes made now move the charts.
  const before = await page.$eval('#traffic-summary', (node) => node.textContent);
  const prompt = Array.from({ length: 64 }, (_, i) => 1000 + i);
  const held = await tokenize(promptWords);
  for (let i = 0; i < 6; ++i) {
    const routed = await api(fleetToken, '/v1/route', { model: 'llama', token_ids: i % 2 ? held : prompt });
    assert.equal(routed.status, 200, JSON.stringify(routed.json));
    await api(fleetToken, `/v1/route/${routed.json.decision_id}/done`, {});
  }
  await page.waitForFunction((text) => {
    const summary = document.getElementById('traffic-summary').textContent;
    const routes = Number((summary.match(/^(\d+) routes/) || [])[1] || 0);
    return summary !== text && routes >= 6;
  }, WAIT, before);
  seen.traffic = await page.$eval('#traffic-summary', (node) => node.textContent);
  const lines = await page.$$eval('#chart-routes polyline', (nodes) => nodes.map((n) => n.getAttribute('points')));
  assert.equal(lines.length, 1);
  const heights = lines[0].split(' ').map((point) => Number(point.split(',')[1]));
  assert.ok(Math.min(...heights) < Math.max(...heights), 'the routes line moved: ' + lines[0]);
  assert.match(seen.traffic, / 6 of 18 blocks credited/, 'three times the held 2 blocks, of 3 x (4 + 2)');
  await page.screenshot({ path: path.join(shots, 'traffic.png'), fullPage: true });

  // Route explorer: a prompt, tokenized by the engine, decided as /v1/route decides it.
  await page.click('#tab-route');
  await page.$eval('#explain-model', (node) => { node.value = 'llama'; });
  await page.type('#explain-prompt', promptWords);
  await page.click('#explain button[type="submit"]');
  await page.waitForFunction(() => document.getElementById('explain-summary').dataset.worker, WAIT);
  const explained = await page.$eval('#explain-summary', (node) => ({ worker: node.dataset.worker, text: node.textContent }));
  const rows = await page.$$eval('#candidates tbody tr[data-worker]', (nodes) => nodes.map((n) => n.dataset.worker));
  const direct = await api(fleetToken, '/v1/route', {
    model: 'llama', token_ids: await tokenize(promptWords),
  });
  assert.equal(direct.status, 200, JSON.stringify(direct.json));
  await api(fleetToken, `/v1/route/${direct.json.decision_id}/done`, {});
  assert.equal(explained.worker, direct.json.worker, 'the explorer and /v1/route agree: ' + explained.text);
  assert.deepEqual(rows, direct.json.candidates.map((c) => c.worker), 'same candidates, same order');
  assert.ok(explained.text.includes(`${direct.json.overlap_blocks} of ${direct.json.prompt_blocks} blocks`), explained.text);
  seen.explained = explained.text;
  await page.screenshot({ path: path.join(shots, 'route.png'), fullPage: true });

  // Fleet: a cache breaker in routed prompts (token 20 of 256 changes each
  // time) is named with its granule and what it costs.
  const stamped = (stamp) => Array.from({ length: 256 }, (_, i) => (i === 20 ? 90000 + stamp : 5000 + i));
  for (let stamp = 0; stamp < 2; ++stamp) {
    const routed = await api(fleetToken, '/v1/route', { model: 'llama', token_ids: stamped(stamp) });
    assert.equal(routed.status, 200, JSON.stringify(routed.json));
    await api(fleetToken, `/v1/route/${routed.json.decision_id}/done`, {});
  }
  await page.click('#tab-fleet');
  await page.waitForSelector('#breakers tr[data-kind="breaker"]', WAIT);
  seen.breaker = await page.$eval('#breakers tr[data-kind="breaker"]', (row) => row.innerText);
  assert.match(seen.breaker, /16 \(\+16\)/, 'the granule of token 20: ' + seen.breaker);
  assert.match(seen.breaker, /224 of 256 tokens/, 'the 14 granules after it: ' + seen.breaker);
  await page.screenshot({ path: path.join(shots, 'breakers.png'), fullPage: true });

  // Governance: a quarantine made through the API appears; a directive is
  // followed to certified and its certificate verified in the page.
  await page.click('#tab-governance');
  const lease = await api(fleetToken, '/v1/events', { events: [{ type: 'nixl_lease', lease_id: 'console-lease',
    event: 'create', role: 'prefill_pin', span_digest: 'console-span', remote_engine: 'w1', tokens: 32,
    ttl_ms: 60000 }] });
  assert.equal(lease.status, 200, JSON.stringify(lease.json));
  await page.waitForFunction(() => {
    const row = document.querySelector('#leases tr[data-lease="console-lease"]');
    return row && row.cells[1].textContent === 'active' && /^[0-9.]+ (s|min)$/.test(row.cells[4].textContent);
  }, WAIT);
  const quarantine = await api(fleetToken, '/v1/quarantine', { model: 'llama', token_ids: prompt, reason: 'console test' });
  assert.equal(quarantine.status, 200, JSON.stringify(quarantine.json));
  await page.waitForSelector(`#quarantines tr[data-quarantine="${quarantine.json.id}"]`, WAIT);
  // A route crossing it is diverted (ADR 0028), and the row counts it.
  await api(fleetToken, '/v1/route', { model: 'llama', token_ids: prompt });
  await page.waitForSelector(`#quarantines tr[data-quarantine="${quarantine.json.id}"] td[data-diverted="1"]`, WAIT);
  // A tenant's revocation is listed as one, with what it waits for.
  const revocation = await api(fleetToken, '/v1/invalidations', { scope: 'tenant', tenant: 'console-gone', reason: 'console revocation' });
  assert.equal(revocation.status, 202, JSON.stringify(revocation.json));
  await page.waitForSelector(`#directives tr[data-directive="${revocation.json.id}"] td[data-revocation="console-gone"]`, WAIT);
  const directive = await api(fleetToken, '/v1/invalidations', { model: 'llama', token_ids: await tokenize(promptWords), reason: 'console test' });
  assert.equal(directive.status, 202, JSON.stringify(directive.json));
  const certifiedRow = `#directives tr[data-directive="${directive.json.id}"][data-state="certified"]`;
  await page.waitForSelector(certifiedRow, { timeout: 30000 });
  await page.click(certifiedRow + ' button.verify');
  await page.waitForFunction(() => document.getElementById('certificate-check').dataset.verified !== undefined, WAIT);
  const verification = await page.$eval('#certificate-check', (node) => ({ ok: node.dataset.verified, text: node.textContent }));
  assert.equal(verification.ok, 'true', verification.text);
  for (const check of ['signature', 'issuer', 'anchor']) {
    assert.ok(await page.$(`#certificate-check li.ok[data-check="${check}"]`), check + ' checked: ' + verification.text);
  }
  seen.certificate = verification.text;
  await page.screenshot({ path: path.join(shots, 'governance.png'), fullPage: true });

  // Journal: the tail, and the chain verified with the API's head hash.
  await page.click('#tab-journal');
  await page.waitForSelector('#journal tbody tr[data-seq]', WAIT);
  await page.click('#verify-journal');
  await page.waitForFunction(() => document.getElementById('journal-verify').dataset.ok !== undefined, WAIT);
  const head = (await api(fleetToken, '/v1/journal?limit=1')).json.head_hash;
  const verified = await page.$eval('#journal-verify', (node) => ({ ok: node.dataset.ok, text: node.textContent }));
  assert.equal(verified.ok, 'true', verified.text);
  assert.ok(verified.text.includes(head), verified.text + ' names ' + head);
  const actors = await page.$$eval('#journal tbody tr[data-seq] td:nth-of-type(4)', (cells) => cells.map((c) => c.textContent));
  assert.ok(actors.includes('token:operator'), 'rows name their actor: ' + actors.join(','));
  seen.journal = verified.text;
  await page.screenshot({ path: path.join(shots, 'journal.png'), fullPage: true });

  // A narrow window: nothing wider than the window but the tables' own scroll.
  await page.setViewport({ width: 420, height: 900 });
  await page.click('#tab-fleet');
  await page.waitForSelector('#workers tbody tr[data-worker]', WAIT);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 1, 'the page is ' + overflow + ' px wider than a narrow window');
  await page.screenshot({ path: path.join(shots, 'fleet-narrow.png'), fullPage: true });
  await page.setViewport({ width: 1280, height: 900 });

  // A tenant-bound token: no fleet-wide data, and only its tenant's governance.
  await page.click('#forget');
  await page.type('#token', tenantToken);
  await page.click('#login button[type="submit"]');
  await page.waitForFunction(() => document.querySelector('#workers tbody tr[data-worker]') &&
    document.querySelector('#workers tbody').textContent.includes('(fleet view only)'), WAIT);
  const tenantQuarantine = await api(tenantToken, '/v1/quarantine', { model: 'llama', token_ids: prompt, reason: 'tenant test' });
  assert.equal(tenantQuarantine.status, 200, JSON.stringify(tenantQuarantine.json));
  await page.click('#tab-governance');
  await page.waitForSelector(`#quarantines tr[data-quarantine="${tenantQuarantine.json.id}"]`, WAIT);
  const listed = await page.$$eval('#quarantines tbody tr[data-quarantine]', (nodes) => nodes.map((n) => n.dataset.quarantine));
  assert.deepEqual(listed, [tenantQuarantine.json.id], 'the fleet quarantine is not the tenant\'s to see');
  assert.equal(await page.$(`#directives tr[data-directive="${directive.json.id}"]`), null);
  await page.click('#tab-traffic');
  await page.waitForFunction(() => /may not read this view/.test(document.getElementById('error').textContent), WAIT);
  // Nothing the fleet token read stays on screen for the tenant's.
  assert.equal(await page.$$eval('#view-traffic polyline', (nodes) => nodes.length), 0);
  assert.equal(await page.$eval('#traffic-summary', (node) => node.textContent), '');
  seen.tenant_quarantines = listed.length;
  await page.screenshot({ path: path.join(shots, 'tenant.png'), fullPage: true });

  const foreign = requested.filter((url) => !url.startsWith(base) && !url.startsWith('data:'));
  assert.deepEqual(foreign, [], 'the page fetched only from kvgov');
  assert.deepEqual(failures, []);
  seen.ok = true;
  console.log(JSON.stringify(seen));
} catch (error) {
  // What the page showed when a check failed, for the test's log.
  await page.screenshot({ path: path.join(shots, 'failure.png'), fullPage: true }).catch(() => {});
  const shown = await page.evaluate(() => document.querySelector('main').innerText).catch(() => '');
  console.error('the page showed:\n' + shown);
  throw error;
} finally {
  await browser.close();
  fs.rmSync(profile, { recursive: true, force: true });
}

// The engine's tokenization of `text`, as the explorer's answer reports it.
async function tokenize(text) {
  const explained = await api(fleetToken, '/v1/route/explain', { model: 'llama', prompt: text });
  assert.equal(explained.status, 200, JSON.stringify(explained.json));
  return explained.json.token_ids;
}
