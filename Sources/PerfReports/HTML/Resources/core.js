'use strict';
// Everything the self-test reports: uncaught exceptions and console errors, from the start.
var problems = [];
window.addEventListener('error', function (event) {
  problems.push('uncaught: ' + event.message + ' at ' + event.lineno + ':' + event.colno);
});
window.addEventListener('unhandledrejection', function (event) {
  problems.push('unhandled rejection: ' + event.reason);
});
var consoleError = console.error;
console.error = function () {
  problems.push('console.error: ' + Array.prototype.map.call(arguments, String).join(' '));
  consoleError.apply(console, arguments);
};

function $(id) { return document.getElementById(id); }
var report = JSON.parse(document.getElementById('report-data').textContent);
// A report rendered by the harness carries its samples in a compact block of its own.
if ($('profile-samples') && report.timeProfile && report.timeProfile.profile) {
  report.timeProfile.profile.samples = JSON.parse($('profile-samples').textContent).map(function (s) {
    return { thread: s[0], weight: s[1], stack: s[2], count: s.length > 3 ? s[3] : 1 };
  });
}
var parsedAt = performance.now();

function esc(value) {
  return String(value).replace(/[&<>"']/g, function (c) {
    return { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c];
  });
}
function isNum(value) { return typeof value === 'number' && isFinite(value); }
function fixed(value, digits) {
  return isNum(value) ? value.toLocaleString('en-US', {
    minimumFractionDigits: digits, maximumFractionDigits: digits }) : '—';
}
// Like Instruments: milliseconds, seconds from ten seconds on.
function ms(value) {
  if (!isNum(value)) return '—';
  if (Math.abs(value) >= 10000) return fixed(value / 1000, 2) + ' s';
  return fixed(value, Math.abs(value) < 10 ? 2 : 1) + ' ms';
}
function int(value) { return isNum(value) ? Math.round(value).toLocaleString('en-US') : '—'; }
function bytes(value) {
  if (!isNum(value)) return '—';
  var units = ['bytes', 'KiB', 'MiB', 'GiB', 'TiB'];
  var size = Math.abs(value), unit = 0;
  while (size >= 1024 && unit < units.length - 1) { size /= 1024; unit++; }
  return (value < 0 ? '-' : '') + (unit === 0 ? String(size) : fixed(size, size < 10 ? 2 : 1)) + ' ' + units[unit];
}
function percent(part, whole) { return whole > 0 ? fixed(part / whole * 100, 1) + '%' : '—'; }
function badge(status) {
  var word = status === true ? 'passed' : status === false ? 'failed' : String(status);
  return '<span class="badge ' + esc(word.replace(/ /g, '-')) + '">' + esc(word) + '</span>';
}
// `passed` only says the run finished unless a check or a baseline judged it (`checked`;
// reports older than that key: whether they hold checks or a comparison).
function verdict() {
  var checked = typeof report.checked === 'boolean' ? report.checked
    : !!((report.checks || []).length || report.comparison);
  return report.status === 'passed' && !checked ? 'no checks' : report.status;
}
function facts(pairs) {
  return '<dl class="facts">' + pairs.filter(function (p) { return p[1] !== undefined && p[1] !== null; })
    .map(function (p) { return '<dt>' + esc(p[0]) + '</dt><dd>' + p[1] + '</dd>'; }).join('') + '</dl>';
}
// A table from column specs {title, num, html(row)}; rows beyond `limit` are left out.
function table(columns, rows, limit) {
  var shown = limit === undefined ? rows : rows.slice(0, limit);
  return '<table><thead><tr>' + columns.map(function (c) {
    return '<th' + (c.num ? ' class="num"' : '') + '>' + esc(c.title) + '</th>';
  }).join('') + '</tr></thead><tbody>' + shown.map(function (row) {
    return '<tr' + (row.passed === false ? ' class="failed"' : '') + '>' + columns.map(function (c) {
      return '<td' + (c.num ? ' class="num"' : '') + '>' + c.html(row) + '</td>';
    }).join('') + '</tr>';
  }).join('') + '</tbody></table>';
}
// An allocation stack, leaf first, system frames grey.
function stackHTML(frames) {
  if (!frames || !frames.length) return '<div class="muted stack">(recorded without stacks)</div>';
  return '<div class="stack">' + frames.map(function (f) {
    var where = f.file ? ' <span class="mod">' + esc(f.file.split('/').pop() + (f.line ? ':' + f.line : '')) +
      '</span>' : '';
    return '<div class="' + (f.isApp ? '' : 'sys') + '">' + esc(f.symbol) + ' <span class="mod">' +
      esc(f.module) + '</span>' + where + '</div>';
  }).join('') + '</div>';
}
// Runs one section; a failure shows in that section (and in the self-test) without
// blanking the rest of the page.
function section(id, title, render) {
  var node = $(id);
  try {
    var html = render();
    if (html === null) return;
    node.hidden = false;
    node.innerHTML = '<h2>' + esc(title) + '</h2>' + html;
    var link = document.createElement('a');
    link.href = '#' + id;
    link.textContent = title;
    $('nav').appendChild(link);
  } catch (error) {
    node.hidden = false;
    node.innerHTML = '<h2>' + esc(title) + '</h2><p class="error">This section could not be drawn: ' +
      esc(error && error.message) + '</p>';
    console.error('section ' + id + ': ' + (error && error.stack || error));
  }
}

function summaryHTML() {
  var s = report.scenario || {};
  var env = report.environment || {};
  var html = '';
  var crash = report.crash;
  if (crash) {
    html += '<h3 class="error">Crash</h3>' + facts([
      ['Signal', esc(crash.signal || 'none')], ['Timed out', crash.timedOut ? 'yes' : 'no']]);
    if (crash.stack && crash.stack.length) html += '<pre class="crash">' + esc(crash.stack.join('\n')) + '</pre>';
    if (crash.standardErrorTail && crash.standardErrorTail.length) {
      html += '<h3>Last lines on stderr</h3><pre class="crash">' + esc(crash.standardErrorTail.join('\n')) +
        '</pre>';
    }
  }
  html += '<div class="columns"><div>' + facts([
    ['Status', badge(verdict())],
    ['Scenario', esc(s.name) + ' <span class="muted">variant</span> ' + esc(s.variant)],
    ['Iterations', int(s.iterations)],
    ['Instruments', esc((s.instruments || []).join(', ') || 'none')],
    ['Wall time', ms(report.wallTimeMilliseconds)],
    ['Error', report.error ? '<span class="error">' + esc(report.error) + '</span>' : null],
  ]) + '</div><div>' + facts([
    ['Tool', esc((report.tool || {}).name + ' ' + (report.tool || {}).version) +
      ' <span class="muted">(schema ' + esc(report.schemaVersion) + ')</span>'],
  ].concat(Object.keys(env).map(function (key) {
    return [key, esc(typeof env[key] === 'object' ? JSON.stringify(env[key]) : env[key])];
  }))) + '</div>';
  var steps = report.steps || [];
  if (steps.length) {
    html += '<div>' + table([
      { title: 'Step', html: function (r) { return esc(r.name); } },
      { title: 'Count', num: true, html: function (r) { return int(r.count); } },
      { title: 'Total', num: true, html: function (r) { return ms(r.totalMilliseconds); } },
      { title: 'Median', num: true, html: function (r) { return ms(r.medianMilliseconds); } },
      { title: 'Max', num: true, html: function (r) { return ms(r.maxMilliseconds); } },
    ], steps, 20) + '</div>';
  }
  var marks = report.marks || [];
  if (marks.length) {
    html += '<div>' + table([
      { title: 'Mark', html: function (m) {
        return esc(m.label) + (m.isMemoryWarning ? ' <span class="error">(memory warning)</span>' : '');
      } },
      { title: 'At', num: true, html: function (m) { return ms(m.timeMilliseconds); } },
    ], marks, 20) + '</div>';
  }
  html += '</div>';
  var checks = report.checks || [];
  html += '<h3>Checks</h3>' + (checks.length ? table([
    { title: 'Check', html: function (c) { return esc(c.name); } },
    { title: 'Limit', num: true, html: function (c) { return esc(checkValue(c.name, c.limit)); } },
    { title: 'Actual', num: true, html: function (c) { return esc(checkValue(c.name, c.actual)); } },
    { title: 'Result', html: function (c) { return badge(c.passed); } },
    { title: 'Detail', html: function (c) { return esc(c.detail || ''); } },
  ], checks) : '<p class="muted">No checks ran (pass --check or a thresholds file).</p>');
  return html + notGatedHTML();
}
// What the run found, before the tables it was read from (Findings.of in PerfReports).
function findingsHTML() {
  var block = $('report-findings');
  if (!block) return null;
  var findings = JSON.parse(block.textContent);
  return '<p>' + badge(verdict()) + '</p><ul class="findings">' + findings.map(function (f) {
    return '<li class="finding ' + esc(f.kind) + (f.isProblem ? ' problem' : '') + '" data-kind="' + esc(f.kind) +
      '"><span class="kind">' + esc(f.kind) + '</span> ' + esc(f.summary) + (f.details && f.details.length
      ? '<ul>' + f.details.map(function (d) { return '<li>' + esc(d) + '</li>'; }).join('') + '</ul>' : '') +
      '</li>';
  }).join('') + '</ul>';
}
// Byte-valued checks read better as sizes; counts stay numbers.
function checkValue(name, value) {
  if (!isNum(value)) return '—';
  return /bytes|growth|size/i.test(name) ? bytes(value) : fixed(value, Number.isInteger(value) ? 0 : 2);
}

// Whether a tolerance judged a comparison row (BaselineComparison.Row.isGated): a row
// without a limit or without both figures passed only because nothing could fail it.
function gated(row) {
  return row.passed === false || (isNum(row.limitPercent) && isNum(row.baseline) && isNum(row.current));
}
// What the run measured that nothing gated (`notGated`): beside a pass, what it does not vouch for.
function notGatedHTML() {
  var figures = Array.isArray(report.notGated) ? report.notGated : [];
  if (!figures.length) return '';
  return '<div class="not-gated"><h3>Not gated</h3><p class="muted">Measured, but no check or baseline ' +
    'tolerance judged it: the status above does not vouch for these.</p><ul>' + figures.map(function (f) {
    return '<li><span class="badge not-gated">not gated</span> ' + esc(f.figure) + ': ' + esc(f.measured) +
      ' <span class="muted">(gate with ' + esc(f.gatedBy) + ')</span></li>';
  }).join('') + '</ul></div>';
}

// Drawn generically: any keys the rows carry become columns, null shows as a dash.
function comparisonHTML() {
  var c = report.comparison;
  if (!c || typeof c !== 'object') return null;
  var rows = (Array.isArray(c.rows) ? c.rows : []).map(function (row) { return row || {}; });
  var titles = { metric: 'Metric', baseline: 'Baseline', current: 'Current', changePercent: 'Change',
    limitPercent: 'Limit', passed: 'Result', detail: 'Detail' };
  // A row's `unit` ("bytes", "ms", "count") formats its values instead of taking a column.
  var keys = Object.keys(titles);
  rows.forEach(function (row) {
    Object.keys(row).forEach(function (k) { if (keys.indexOf(k) < 0 && k !== 'unit') keys.push(k); });
  });
  keys = keys.filter(function (k) { return rows.some(function (row) { return k in row; }) || k !== 'detail'; });
  function cell(key, row) {
    var value = row[key];
    if (value === null || value === undefined) return '—';
    if (key === 'passed') return badge(gated(row) ? value : 'not gated');
    if (key === 'changePercent') return (value > 0 ? '+' : '') + fixed(value, 1) + '%';
    if (key === 'limitPercent') return fixed(value, 1) + '%';
    if ((key === 'baseline' || key === 'current') && isNum(value)) {
      if (row.unit === 'bytes') return bytes(value);
      if (row.unit === 'ms') return ms(value);
      if (row.unit === 'count') return int(value);
    }
    if (isNum(value)) return fixed(value, Number.isInteger(value) ? 0 : 3);
    return esc(typeof value === 'object' ? JSON.stringify(value) : value);
  }
  function shown(value) {
    if (value === null || value === undefined) return '—';
    if (typeof value === 'boolean') return badge(value);
    return esc(typeof value === 'object' ? JSON.stringify(value) : value);
  }
  var known = { passed: 'Result', baseline: 'Baseline', baselineScenario: 'Baseline run',
    tolerancePercent: 'Tolerance', timeTolerancePercent: 'Time tolerance', peakTolerancePercent: 'Peak heap tolerance', minimumBytes: 'Ignored growth', minimumCount: 'Ignored blocks' };
  var pairs = Object.keys(known).filter(function (k) { return k in c || k === 'passed' || k === 'baseline'; })
    .map(function (k) {
      var v = c[k];
      if (/Percent$/.test(k)) {
        return [known[k], isNum(v) ? fixed(v, 1) + '%' : k === 'timeTolerancePercent' ? 'times not gated' : k === 'peakTolerancePercent' ? 'peak heap not gated' : '—'];
      }
      if (k === 'minimumBytes' && isNum(v)) return [known[k], 'up to ' + bytes(v)];
      if (k === 'minimumCount' && isNum(v)) return [known[k], 'up to ' + v];
      // A comparison none of whose rows was judged vouches for nothing.
      if (k === 'passed' && v !== false && !rows.some(gated)) return [known[k], badge('not gated')];
      return [known[k], shown(v)];
    });
  var drawn = ['rows', 'functionChanges', 'functionShares', 'allocationChanges', 'allocationStackBaselines',
    'totalStackBaselines'];
  Object.keys(c).forEach(function (k) {
    if (!(k in known) && drawn.indexOf(k) < 0) pairs.push([k, shown(c[k])]);
  });
  var html = facts(pairs);
  html += rows.length ? table(keys.map(function (key) {
    return { title: titles[key] || key, num: ['baseline', 'current', 'changePercent', 'limitPercent'].indexOf(key) >= 0,
      html: function (row) { return cell(key, row); } };
  }), rows) : '<p class="muted">No metrics compared.</p>';
  function points(v) { return isNum(v) ? (v > 0 ? '+' : '') + fixed(v, 1) + ' pts' : '—'; }
  if (Array.isArray(c.functionChanges) && c.functionChanges.length) {
    html += '<h3>Functions that moved most</h3><p class="muted">Share of the samples executing in each ' +
      'of the program\'s functions (Hide System Libraries), in the baseline and now.</p>' + table([
      { title: 'Change', num: true, html: function (f) {
        var d = f.currentSelfPercent - f.baselineSelfPercent;
        return '<span class="' + (d > 0 ? 'error' : 'ok') + '">' + points(d) + '</span>';
      } },
      { title: 'Baseline', num: true, html: function (f) { return fixed(f.baselineSelfPercent, 1) + '%'; } },
      { title: 'Now', num: true, html: function (f) { return fixed(f.currentSelfPercent, 1) + '%'; } },
      { title: 'Function', html: function (f) { return esc(f.symbol) + ' <span class="mod">' + esc(f.module) + '</span>'; } },
    ], c.functionChanges);
  }
  if (Array.isArray(c.allocationChanges) && c.allocationChanges.length) {
    html += '<h3>Allocation stacks that grew most</h3><p class="muted">Bytes still live at the end, by ' +
      'where the program allocated them.</p>' + table([
      { title: 'Growth', num: true, html: function (a) { return '+' + bytes(a.currentBytes - a.baselineBytes); } },
      { title: 'Blocks', num: true, html: function (a) { return int(a.currentCount) + ' (was ' + int(a.baselineCount) + ')'; } },
      { title: 'Where', html: function (a) { return esc(a.site); } },
      { title: 'What', html: function (a) { return esc(a.category); } },
    ], c.allocationChanges);
  }
  return html;
}
