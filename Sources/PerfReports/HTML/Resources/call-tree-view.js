// ---- The Call Tree panel: options, search, expandable rows, flame graph. ----
var OPTIONS = [
  ['separateByThread', 'Separate by Thread'],
  ['invert', 'Invert Call Tree'],
  ['hideSystemLibraries', 'Hide System Libraries'],
  ['flattenRecursion', 'Flatten Recursion'],
  ['topFunctions', 'Top Functions'],
];
// Not an Instruments option: Instruments records the app alone, this page a process whose
// entry runs through the harness. Folding those frames starts the tree at the scenario.
var VIEW_OPTIONS = OPTIONS.concat([['startAtScenario', 'Start at Scenario']]);
// Instruments' tutorial starts here: Separate by Thread and Hide System Libraries on.
var DEFAULT_OPTIONS = ['separateByThread', 'hideSystemLibraries', 'startAtScenario'];
var ROW_CAP = 3000;          // rows drawn at once; deeper expansion asks for more
var CHILD_CAP = 100;         // children shown per row before a "more" row
var treeState = null;

function CallTreePanel(model) {
  this.model = model;
  this.options = {};
  var self = this;
  VIEW_OPTIONS.forEach(function (o) { self.options[o[0]] = DEFAULT_OPTIONS.indexOf(o[0]) >= 0; });
  this.query = '';
  this.expanded = new Set();
  this.childLimit = new Map();
  this.rootLimit = CHILD_CAP;
  this.zoomKey = null;
  // Against a baseline, the flame graph is coloured by each function's change in self time.
  this.shares = null;
  var comparison = report.comparison;
  if (comparison && Array.isArray(comparison.functionShares) && comparison.functionShares.length) {
    var shares = this.shares = new Map();
    comparison.functionShares.forEach(function (f) {
      shares.set(f.symbol + '\u0000' + f.module, f.currentSelfPercent - f.baselineSelfPercent);
    });
    this.maxChange = comparison.functionShares.reduce(function (m, f) {
      return Math.max(m, Math.abs(f.currentSelfPercent - f.baselineSelfPercent));
    }, 0);
  }
  this.differential = this.shares !== null;
}

CallTreePanel.prototype.html = function () {
  var options = this.options;
  return '<div class="toolbar" id="ct-options">' + VIEW_OPTIONS.map(function (o) {
    return '<label><input type="checkbox" id="opt-' + o[0] + '" data-option="' + o[0] + '"' +
      (options[o[0]] ? ' checked' : '') + '> ' + esc(o[1]) + '</label>';
  }).join('') + '<input type="search" id="ct-search" placeholder="Search symbols" aria-label="Search symbols">' +
    '</div><div class="calltree" id="calltree" role="tree"></div>' +
    '<h3>Flame graph <span class="muted" id="flame-note"></span> <button id="flame-reset" hidden>Reset zoom</button>' +
    (this.shares ? ' <label class="flame-diff"><input type="checkbox" id="flame-diff" checked> Colour by the ' +
      'change from the baseline</label>' : '') + '</h3><div class="flame" id="flame"></div>';
};

CallTreePanel.prototype.attach = function () {
  var self = this;
  VIEW_OPTIONS.forEach(function (o) {
    $('opt-' + o[0]).addEventListener('change', function (event) {
      self.options[o[0]] = event.target.checked;
      self.reset();
    });
  });
  $('ct-search').addEventListener('input', function (event) {
    self.query = event.target.value.trim().toLowerCase();
    self.reset();
  });
  $('calltree').addEventListener('click', function (event) {
    var row = event.target.closest('.ct-row');
    if (!row || !row.dataset.key) return;
    var key = row.dataset.key;
    if (row.classList.contains('more')) {
      if (key === '') self.rootLimit += CHILD_CAP * 5;
      else self.childLimit.set(key, (self.childLimit.get(key) || CHILD_CAP) + CHILD_CAP * 5);
    } else if (self.expanded.has(key)) {
      self.expanded.delete(key);
    } else {
      self.expanded.add(key);
    }
    self.drawTree();
  });
  $('flame').addEventListener('click', function (event) {
    var key = event.target.closest('g') && event.target.closest('g').dataset.key;
    if (key === undefined) return;
    self.zoomKey = key;
    self.drawFlame();
  });
  $('flame-reset').addEventListener('click', function () { self.zoomKey = null; self.drawFlame(); });
  if ($('flame-diff')) {
    $('flame-diff').addEventListener('change', function (event) {
      self.differential = event.target.checked;
      self.drawFlame();
    });
  }
  this.reset();
};

// New options or search: rebuild the roots, expand the heaviest path (or every path to a match).
CallTreePanel.prototype.reset = function () {
  var tree = this.model.roots(this.options, this.query);
  this.roots = tree.rows;
  this.totalWeight = tree.totalWeight;
  this.expanded = new Set();
  this.childLimit = new Map();
  this.rootLimit = CHILD_CAP;
  this.zoomKey = null;
  if (this.query) {
    this.expandMatches();
  } else {
    var row = this.roots[0];
    for (var depth = 0; row && depth < 24 && row.hasChildren(); depth++) {
      this.expanded.add(row.key);
      row = row.children()[0];
    }
  }
  this.drawTree();
  this.drawFlame();
};

CallTreePanel.prototype.expandMatches = function () {
  // Top Functions filters its roots by name; the other views keep only branches that lead to a
  // match, so opening every row (within a budget) shows the paths to the matches.
  if (this.options.topFunctions) return;
  var budget = 400, work = this.roots.slice(0, CHILD_CAP).reverse();
  while (work.length && budget > 0) {
    var row = work.pop(), children = row.children();
    if (!children.length) continue;
    this.expanded.add(row.key);
    budget--;
    for (var i = Math.min(children.length, CHILD_CAP) - 1; i >= 0; i--) work.push(children[i]);
  }
};

// Visible rows in display order, at most ROW_CAP of them.
CallTreePanel.prototype.visibleRows = function () {
  var out = [], work = [];
  var roots = this.roots;
  if (roots.length > this.rootLimit) {
    work.push({ more: true, key: '', depth: 0, rows: roots.slice(this.rootLimit) });
  }
  for (var i = Math.min(roots.length, this.rootLimit) - 1; i >= 0; i--) work.push({ row: roots[i], depth: 0 });
  while (work.length && out.length < ROW_CAP) {
    var item = work.pop();
    out.push(item);
    if (item.more || !this.expanded.has(item.row.key)) continue;
    var children = item.row.children();
    var limit = this.childLimit.get(item.row.key) || CHILD_CAP;
    if (children.length > limit) {
      work.push({ more: true, key: item.row.key, depth: item.depth + 1, rows: children.slice(limit) });
    }
    for (var c = Math.min(children.length, limit) - 1; c >= 0; c--) work.push({ row: children[c], depth: item.depth + 1 });
  }
  return out;
};

CallTreePanel.prototype.drawTree = function () {
  var total = this.totalWeight, query = this.query, self = this;
  var rows = this.visibleRows();
  var html = '<div class="ct-row head"><span class="num">Weight</span><span class="num">%</span>' +
    '<span class="num">Self</span><span>Symbol</span></div>';
  html += rows.map(function (item) {
    var indent = 'padding-left:' + (6 + item.depth * 14) + 'px';
    if (item.more) {
      var weight = item.rows.reduce(function (sum, r) { return sum + r.total; }, 0);
      return '<div class="ct-row more" data-key="' + esc(item.key) + '"><span class="num">' + esc(ms(weight)) +
        '</span><span class="num">' + percent(weight, total) + '</span><span></span><span class="sym" style="' +
        indent + '">… ' + item.rows.length + ' more (show)</span></div>';
    }
    var row = item.row, open = self.expanded.has(row.key);
    var classes = 'ct-row' + (row.kind === 'thread' ? ' thread' : row.isApp ? '' : ' sys') +
      (query && row.kind === 'function' && matchesQuery(row, query) ? ' match' : '');
    var twisty = row.hasChildren() ? (open ? '▾' : '▸') : '';
    return '<div class="' + classes + '" role="treeitem" data-key="' + esc(row.key) + '"><span class="num">' +
      esc(ms(row.total)) + '</span><span class="num">' + percent(row.total, total) + '</span><span class="num">' +
      esc(ms(row.self)) + '</span><span class="sym" style="' + indent + '" title="' + esc(row.name) + '">' +
      '<span class="twisty">' + twisty + '</span>' + esc(row.name) +
      (row.module ? '<span class="mod">' + esc(row.module) + '</span>' : '') + '</span></div>';
  }).join('');
  if (!rows.length) {
    html += '<div class="ct-row"><span></span><span></span><span></span><span class="muted">' +
      (query ? 'No symbol matches “' + esc(query) + '”.' : 'No samples.') + '</span></div>';
  }
  if (rows.length >= ROW_CAP) {
    html += '<div class="ct-row"><span></span><span></span><span></span><span class="muted">Showing the first ' +
      ROW_CAP + ' rows: collapse some to see further.</span></div>';
  }
  $('calltree').innerHTML = html;
};

// A flame graph of the current tree. Top Functions has no single tree, so it draws the
// tree without it.
CallTreePanel.prototype.drawFlame = function () {
  var options = Object.assign({}, this.options, { topFunctions: false });
  var roots = this.options.topFunctions || this.query ? this.model.roots(options, '').rows : this.roots;
  $('flame-note').textContent = (this.options.topFunctions ? '(of the tree without Top Functions; click a frame to zoom)'
    : '(root at the top, widths are weight; click a frame to zoom)') + (this.differential
    ? ' red: more self time than in the baseline, blue: less, the deeper the more; grey: no change or not the ' +
      'program\'s' : '');
  var zoomed = this.zoomKey !== null ? findRow(roots, this.zoomKey) : null;
  $('flame-reset').hidden = !zoomed;
  var drawn = icicle(zoomed ? [zoomed] : roots, $('flame'), ms, 'Flame graph',
    this.differential ? this.changePaint() : null);
  $('flame').innerHTML = drawn.rects ? drawn.svg : '<p class="muted">' + (drawn.total > 0
    ? 'Every frame is narrower than a pixel: the weight is spread over many roots.' : 'No samples.') + '</p>';
  $('flame').dataset.rects = drawn.rects;
};

// An icicle flame graph (root on top) of rows with `key`, `name`, `module`, `kind`, `isApp`,
// `total` and `children()`, left-heavy, drawn only for frames at least a pixel wide;
// `format` writes a weight. The CPU profile's and the allocations' flame graphs.
// `paint(row)`, when given, returns the frame's fill and a note for its tooltip, or null.
function icicle(top, container, format, label, paint) {
  var width = Math.max(600, (container.clientWidth || 1200) - 2), rowHeight = 17, maxRects = 20000;
  var total = top.reduce(function (sum, r) { return sum + r.total; }, 0);
  var rects = [], depthMax = 0;
  var work = [];
  var x = 0;
  top.forEach(function (row) { work.push({ row: row, x: x, depth: 0 }); x += row.total; });
  while (work.length && rects.length < maxRects) {
    var item = work.pop(), w = total > 0 ? item.row.total / total * width : 0;
    if (w < 1) continue;
    rects.push({ row: item.row, x: total > 0 ? item.x / total * width : 0, w: w, depth: item.depth });
    depthMax = Math.max(depthMax, item.depth);
    var cx = item.x;
    item.row.children().forEach(function (child) {
      work.push({ row: child, x: cx, depth: item.depth + 1 });
      cx += child.total;
    });
  }
  var height = (depthMax + 1) * rowHeight;
  var svg = '<svg width="' + width + '" height="' + height + '" role="img" aria-label="' + esc(label) + '">' +
    rects.map(function (r) {
      var row = r.row, painted = paint && row.kind !== 'thread' ? paint(row) : null;
      var fill = painted ? painted.fill : row.kind === 'thread' ? '#c7d7f0' : row.kind === 'category' ? '#bfe3c9'
        : row.isApp ? flameColor(row.name) : '#d5d5da';
      var text = r.w > 36 ? truncate(row.name, Math.floor((r.w - 6) / 6.4)) : '';
      return '<g data-key="' + esc(row.key) + '" data-kind="' + esc(row.kind || '') + '" data-app="' +
        (row.isApp ? 1 : 0) + '"' + (painted ? ' data-change="' + painted.change + '"' : '') + '><title>' +
        esc(row.name + (row.module ? ' [' + row.module + ']' : '') + ' — ' + format(row.total) + ' (' +
        percent(row.total, total) + ')' + (painted ? '; ' + painted.note : '')) + '</title><rect x="' + r.x.toFixed(1) +
        '" y="' + r.depth * rowHeight + '" width="' + r.w.toFixed(1) + '" height="' + (rowHeight - 1) +
        '" fill="' + fill + '"></rect>' + (text ? '<text x="' + (r.x + 3).toFixed(1) + '" y="' +
        (r.depth * rowHeight + 12) + '">' + esc(text) + '</text>' : '') + '</g>';
    }).join('') + '</svg>';
  return { svg: svg, rects: rects.length, total: total };
}

// Red for a function that gained self time against the baseline, blue for one that lost
// it, deeper the more it moved (against the largest move); grey when it did not move.
CallTreePanel.prototype.changePaint = function () {
  var shares = this.shares, largest = Math.max(this.maxChange, 0.5);
  return function (row) {
    var change = shares.get(row.name + '\u0000' + row.module);
    if (change === undefined) return { fill: '#e4e4e8', change: 'none', note: 'not the program\'s, or no self time' };
    var sign = change > 0 ? '+' : '';
    var note = 'self ' + sign + change.toFixed(1) + ' points against the baseline';
    if (Math.abs(change) < 0.05) return { fill: '#e4e4e8', change: 'same', note: note };
    var depth = Math.min(1, Math.abs(change) / largest);
    var light = (92 - depth * 40).toFixed(0);
    return change > 0 ? { fill: 'hsl(4,80%,' + light + '%)', change: 'more', note: note }
      : { fill: 'hsl(214,80%,' + light + '%)', change: 'less', note: note };
  };
};

function findRow(roots, key) {
  var work = roots.slice();
  while (work.length) {
    var row = work.pop();
    if (row.key === key) return row;
    if (key.indexOf(row.key + '/') === 0) work = work.concat(row.children());
  }
  return null;
}
function truncate(text, length) {
  if (length < 2) return '';
  return text.length <= length ? text : text.slice(0, length - 1) + '…';
}
// Warm colours for app code, stable per name so a function keeps its colour between views.
function flameColor(name) {
  var h = 0;
  for (var i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) | 0;
  var hue = 10 + Math.abs(h) % 40;
  return 'hsl(' + hue + ',85%,' + (62 + Math.abs(h >> 8) % 14) + '%)';
}

function timeProfileHTML() {
  var tp = report.timeProfile;
  if (!tp) return null;
  var html = '<p>' + int(tp.sampleCount) + ' samples at ' + int(tp.sampleRateHz) + ' Hz (' + esc(tp.clock) +
    ' clock' + (tp.lostSamples ? ', <span class="error">' + int(tp.lostSamples) + ' lost</span>' : '') + '), ' +
    ms(tp.totalWeightMilliseconds) + ' of samples over ' + ms(tp.durationMilliseconds) +
    ' <span class="muted">· sampler ' + fixed(tp.handlerMedianMicroseconds, 1) + ' µs median, ' +
    fixed(tp.handlerP90Microseconds, 1) + ' µs p90 per sample</span></p>';
  html += treeState.html();
  var threads = tp.threads || [];
  if (threads.length) {
    html += '<h3>Threads</h3>' + table([
      { title: 'Thread', html: function (t) {
        return esc(t.name) + (t.isMain ? ' <span class="muted">(main)</span>' : '');
      } },
      { title: 'Samples', num: true, html: function (t) { return int(t.sampleCount); } },
      { title: 'Weight', num: true, html: function (t) { return ms(t.weightMilliseconds); } },
      { title: '%', num: true, html: function (t) { return fixed(t.percent, 1) + '%'; } },
      { title: 'Heaviest function (Hide System Libraries)', html: function (t) {
        var f = (t.topFunctions || [])[0];
        return f ? esc(f.symbol) + ' <span class="mod">' + esc(f.module) + '</span>' : '';
      } },
    ], threads, 50);
  }
  return html;
}
