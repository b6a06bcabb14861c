// The script of the HTML profile report (profile_html.cpp embeds it): a canvas timeline that
// zooms (wheel, buttons, drag to pan), shows an instruction's details and the instructions it
// waited on and that waited on it when clicked, and follows the URL fragment
// #select=<event>&zoom=<t0>,<t1> so a report can be opened on an instruction.
namespace neuron {

// Reads the global P written by html_report: P.units, P.instrs [opcode, engine, file, line,
// operands], P.ev [instr, unit, start, end, occupancy, wait_on, wait_ns, kind, memory, program,
// bytes, flops, table_load], P.total.
const char* profile_html_script() {
  return R"JS(
(function () {
  const E = P.ev, I = P.instrs;
  const canvas = document.getElementById('tl'), ctx = canvas.getContext('2d');
  const details = document.getElementById('details'), view = document.getElementById('view');
  const colors = { tensor: '#3b78c3', vector: '#e8912d', scalar: '#8e5bb5', gpsimd: '#8c6d46',
                   dma: '#3a9a5b' };
  const kinds = ['none', 'true', 'anti', 'output'];
  const left = 90, rowH = 16;
  let t0 = 0, t1 = P.total > 0 ? P.total : 1, selected = -1;
  // Rows: units with events (engines always), and each unit's events sorted by start.
  const byUnit = P.units.map(() => []);
  E.forEach((e, i) => byUnit[e[1]].push(i));
  byUnit.forEach(l => l.sort((a, b) => E[a][2] - E[b][2]));
  const rows = [];
  P.units.forEach((u, i) => { if (i < 4 || byUnit[i].length) rows.push(i); });
  const rowOf = {};
  rows.forEach((u, r) => { rowOf[u] = r; });
  let waiters = null;  // event -> events that waited on it, built when first needed
  function us(ns) { return (ns / 1000).toFixed(3) + ' us'; }
  function where(i) { const f = I[i][2] || '<unknown>'; return f.split('/').pop() + ':' + I[i][3]; }
  function esc(s) {
    return String(s).replace(/[&<>"]/g, c => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;',
                                                 '"': '&quot;' }[c]));
  }
  function width() { return canvas.width - left - 10; }
  function x(t) { return left + (t - t0) / (t1 - t0) * width(); }
  function draw() {
    canvas.width = Math.max(600, canvas.parentElement.clientWidth - 4);
    canvas.height = rows.length * rowH + 24;
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    ctx.font = '11px sans-serif';
    rows.forEach((u, r) => { ctx.fillStyle = '#333'; ctx.fillText(P.units[u], 4, r * rowH + 12); });
    // Ticks.
    const span = t1 - t0;
    let step = Math.pow(10, Math.floor(Math.log10(span / 5)));
    if (span / step > 10) step *= 2;
    if (span / step > 10) step *= 2.5;
    ctx.fillStyle = '#777';
    for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
      const xx = x(t);
      ctx.fillRect(xx, 0, 1, rows.length * rowH);
      ctx.fillText((t / 1000).toPrecision(4) + ' us', xx + 2, rows.length * rowH + 14);
    }
    // Slices; tiny neighbours merge at the canvas resolution.
    rows.forEach((u, r) => {
      let lastX = -1;
      for (const i of byUnit[u]) {
        const e = E[i];
        if (e[3] < t0) continue;
        if (e[2] > t1) break;
        const x0 = Math.max(left, x(e[2])), x1 = Math.min(canvas.width, x(e[3]));
        if (e[6] > 0) {
          ctx.fillStyle = '#d62728';
          const w0 = Math.max(left, x(e[2] - e[6]));
          ctx.fillRect(w0, r * rowH + rowH - 5, Math.max(x0 - w0, 0.5), 2);
        }
        if (x1 < lastX) continue;
        ctx.fillStyle = colors[I[e[0]][1]] || '#888';
        ctx.fillRect(x0, r * rowH + 2, Math.max(x1 - x0, 0.6), rowH - 7);
        lastX = x0 + 0.5;
      }
    });
    if (selected >= 0) {
      const box = (i, c) => {
        const e = E[i], r = rowOf[e[1]];
        ctx.strokeStyle = c;
        ctx.lineWidth = 2;
        ctx.strokeRect(x(e[2]) - 1, r * rowH + 1, Math.max(x(e[3]) - x(e[2]), 2) + 2, rowH - 5);
      };
      const e = E[selected];
      if (e[5] >= 0) {
        const p = E[e[5]];
        ctx.strokeStyle = '#d62728';
        ctx.beginPath();
        ctx.moveTo(x(p[3]), rowOf[p[1]] * rowH + 8);
        ctx.lineTo(x(e[2]), rowOf[e[1]] * rowH + 8);
        ctx.stroke();
        box(e[5], '#d62728');
      }
      box(selected, '#000');
    }
    view.textContent = (t0 / 1000).toFixed(3) + ' .. ' + (t1 / 1000).toFixed(3) + ' us';
  }
  function link(i) {
    return '<a href="#" data-ev="' + i + '">' + esc(I[E[i][0]][0]) + ' at ' + esc(where(E[i][0])) +
           '</a> (' + esc(P.units[E[i][1]]) + ', ' + us(E[i][2]) + ')';
  }
  function show(i) {
    selected = i;
    if (i < 0) { details.innerHTML = 'Click an instruction on the timeline.'; draw(); return; }
    const e = E[i], ins = I[e[0]];
    let h = '<b>' + esc(ins[0]) + '</b> on ' + esc(P.units[e[1]]) + ' &middot; source <a href="#L' +
            esc(ins[2]) + ':' + ins[3] + '" data-src="' + esc(ins[2]) + ':' + ins[3] + '">' +
            esc(where(e[0])) + '</a><br>' + esc(ins[4]) + '<br>start ' + us(e[2]) + ', end ' +
            us(e[3]) + ' (' + us(e[3] - e[2]) + '), engine time ' + us(e[4]);
    if (e[10]) h += ', ' + e[10] + ' bytes';
    if (e[11] && ins[1] === 'tensor') h += ', ' + e[11] + ' FLOPs';
    if (e[12]) h += ', activation table load ' + us(e[12]);
    h += ', program ' + e[9];
    if (e[5] >= 0)
      h += '<div class="waited">waited ' + us(e[6]) + ' for ' + link(e[5]) + ': ' + kinds[e[7]] +
           ' dependence on ' + esc(e[8]) + '</div>';
    if (!waiters) {
      waiters = {};
      E.forEach((w, j) => { if (w[5] >= 0) (waiters[w[5]] = waiters[w[5]] || []).push(j); });
    }
    const ws = waiters[i] || [];
    if (ws.length)
      h += '<div>waited on by: ' + ws.slice(0, 10).map(link).join('; ') +
           (ws.length > 10 ? ' and ' + (ws.length - 10) + ' more' : '') + '</div>';
    details.innerHTML = h;
    draw();
  }
  function zoom(f, at) {
    const span = (t1 - t0) * f, c = at === undefined ? (t0 + t1) / 2 : at;
    const a = (c - t0) / (t1 - t0);
    t0 = Math.max(0, c - a * span);
    t1 = Math.min(Math.max(P.total, 1), t0 + span);
    draw();
  }
  function hit(ev) {
    const rect = canvas.getBoundingClientRect();
    const mx = ev.clientX - rect.left, my = ev.clientY - rect.top, r = Math.floor(my / rowH);
    if (mx < left || r < 0 || r >= rows.length) return -1;
    const t = t0 + (mx - left) / width() * (t1 - t0), tol = 3 / width() * (t1 - t0);
    let best = -1;
    for (const i of byUnit[rows[r]]) {
      const e = E[i];
      if (e[2] > t + tol) break;
      if (e[3] >= t - tol) best = i;
    }
    return best;
  }
  let drag = null;
  canvas.addEventListener('wheel', ev => {
    ev.preventDefault();
    const rect = canvas.getBoundingClientRect();
    zoom(ev.deltaY < 0 ? 0.7 : 1 / 0.7, t0 + (ev.clientX - rect.left - left) / width() * (t1 - t0));
  });
  canvas.addEventListener('mousedown', ev => { drag = { x: ev.clientX, t0, t1, moved: false }; });
  window.addEventListener('mouseup', ev => {
    if (drag && !drag.moved) show(hit(ev));
    drag = null;
  });
  window.addEventListener('mousemove', ev => {
    if (!drag) return;
    const dt = (ev.clientX - drag.x) / width() * (drag.t1 - drag.t0);
    if (Math.abs(ev.clientX - drag.x) > 2) drag.moved = true;
    t0 = Math.max(0, drag.t0 - dt);
    t1 = t0 + (drag.t1 - drag.t0);
    draw();
  });
  document.getElementById('zin').onclick = () => zoom(0.5);
  document.getElementById('zout').onclick = () => zoom(2);
  document.getElementById('zreset').onclick = () => { t0 = 0; t1 = Math.max(P.total, 1); draw(); };
  document.addEventListener('click', ev => {
    const a = ev.target.closest && ev.target.closest('a[data-ev]');
    if (a) {
      ev.preventDefault();
      const i = +a.dataset.ev, e = E[i];
      if (e[2] < t0 || e[3] > t1) {
        const span = t1 - t0;
        t0 = Math.max(0, e[2] - span / 2);
        t1 = t0 + span;
      }
      show(i);
    }
  });
  window.addEventListener('resize', draw);
  // #select=<event>&zoom=<t0>,<t1> (ns)
  const args = {};
  location.hash.slice(1).split('&').forEach(kv => {
    const [k, v] = kv.split('=');
    if (k) args[k] = v;
  });
  if (args.zoom) {
    const [a, b] = args.zoom.split(',').map(Number);
    if (b > a) { t0 = a; t1 = b; }
  }
  show(args.select !== undefined && +args.select < E.length ? +args.select : -1);
})();
)JS";
}

}  // namespace neuron
