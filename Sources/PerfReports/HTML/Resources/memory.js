// ---- Allocations: categories, generations, the live heap over time. ----
var CATEGORY_COLUMNS = [
  { key: 'name', title: 'Category', text: true },
  { key: 'persistentCount', title: '# Persistent', format: int },
  { key: 'transientCount', title: '# Transient', format: int },
  { key: 'totalCount', title: '# Total', format: int },
  { key: 'persistentBytes', title: 'Persistent Bytes', format: bytes },
  { key: 'totalBytes', title: 'Total Bytes', format: bytes },
];

function CategoryTable(categories) {
  this.categories = categories;
  this.filter = '';
  this.sortKey = 'persistentBytes';
  this.descending = true;
  this.limit = 200;
}
CategoryTable.prototype.html = function () {
  return '<div class="toolbar"><input type="search" id="alloc-filter" placeholder="Filter categories" ' +
    'aria-label="Filter categories"><span class="muted" id="alloc-count"></span></div><div id="alloc-table"></div>';
};
CategoryTable.prototype.attach = function () {
  var self = this;
  $('alloc-filter').addEventListener('input', function (event) {
    self.filter = event.target.value.trim().toLowerCase();
    self.limit = 200;
    self.draw();
  });
  $('alloc-table').addEventListener('click', function (event) {
    var th = event.target.closest('th[data-key]');
    if (th) {
      var key = th.dataset.key;
      if (self.sortKey === key) self.descending = !self.descending;
      else { self.sortKey = key; self.descending = key !== 'name'; }
      self.draw();
    } else if (event.target.id === 'alloc-more') {
      self.limit += 1000;
      self.draw();
    }
  });
  this.draw();
};
CategoryTable.prototype.rows = function () {
  var filter = this.filter, key = this.sortKey, sign = this.descending ? -1 : 1;
  var rows = filter ? this.categories.filter(function (c) { return c.name.toLowerCase().indexOf(filter) >= 0; })
    : this.categories.slice();
  rows.sort(function (a, b) {
    var x = a[key], y = b[key];
    if (x === y) return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
    return (x < y ? -1 : 1) * sign;
  });
  return rows;
};
CategoryTable.prototype.draw = function () {
  var self = this, rows = this.rows();
  var html = '<table id="alloc-categories"><thead><tr>' + CATEGORY_COLUMNS.map(function (c) {
    var sorted = self.sortKey === c.key ? (self.descending ? ' sorted-desc' : ' sorted-asc') : '';
    return '<th class="sortable' + (c.text ? '' : ' num') + sorted + '" data-key="' + c.key + '">' + esc(c.title) +
      '</th>';
  }).join('') + '</tr></thead><tbody>' + rows.slice(0, this.limit).map(function (row) {
    return '<tr>' + CATEGORY_COLUMNS.map(function (c) {
      return c.text ? '<td>' + esc(row[c.key]) + '</td>' : '<td class="num">' + c.format(row[c.key]) + '</td>';
    }).join('') + '</tr>';
  }).join('') + '</tbody></table>';
  if (rows.length > this.limit) {
    html += '<button id="alloc-more">Show more (' + int(rows.length - this.limit) + ' not shown)</button>';
  }
  $('alloc-table').innerHTML = html;
  $('alloc-count').textContent = int(rows.length) + ' of ' + int(this.categories.length) + ' categories';
};

var categoryTable = null;

// ---- Allocations: what was live at the end by allocation stack, as a flame graph. ----
// Root first, the category of the stack's blocks last. Hide System Libraries keeps the
// program's own frames, as Instruments' option does. Switchable to everything allocated
// while recording (total bytes and counts, `totalStacks`), whose stacks carry no category.
function AllocationFlame(a) {
  this.stacks = a.persistentStacks || [];
  this.totals = a.totalStacks || [];
  this.frames = a.stackFrames || [];
  this.metric = 'bytes';
  this.hideSystemLibraries = true;
  this.zoomKey = null;
  // Against a baseline: what it kept live at each of these stacks (absent: nothing), so each
  // frame is coloured by how much more or less lives under it now.
  // The same for the totals, by totalStacks index.
  this.baselines = null;
  this.totalBaselines = null;
  var comparison = report.comparison;
  function byStack(list) {
    var map = new Map();
    list.forEach(function (b) { map.set(b.stack, b); });
    return map;
  }
  if (comparison && Array.isArray(comparison.allocationStackBaselines)) {
    this.baselines = byStack(comparison.allocationStackBaselines);
  }
  if (comparison && Array.isArray(comparison.totalStackBaselines)) {
    this.totalBaselines = byStack(comparison.totalStackBaselines);
  }
  // The rest of the baseline (its stacks this run lacks, its totals): a differential root
  // weighs the whole baseline, not only the stacks that match.
  this.unmatched = comparison && comparison.unmatchedBaseline && typeof comparison.unmatchedBaseline === 'object'
    ? comparison.unmatchedBaseline : null;
  this.wholeNow = a.totals || {};
  this.differential = this.baselines !== null;
}
AllocationFlame.prototype.html = function () {
  if (!this.stacks.length) {
    return '<p class="muted">No allocation stacks: recorded with --no-allocation-stacks, or nothing was live ' +
      'at the end.</p>';
  }
  return '<div class="toolbar"><label><input type="radio" name="aflame-metric" id="aflame-bytes" checked> ' +
    'Persistent bytes</label> <label><input type="radio" name="aflame-metric" id="aflame-count"> # Persistent' +
    '</label> ' + (this.totals.length ? '<label><input type="radio" name="aflame-metric" id="aflame-total-bytes"> ' +
      'Total bytes</label> <label><input type="radio" name="aflame-metric" id="aflame-total-count"> # Total</label> '
      : '') +
    '<label><input type="checkbox" id="aflame-hide" checked> Hide System Libraries</label> ' +
    (this.baselines ? '<label class="flame-diff"><input type="checkbox" id="aflame-diff" checked> Colour by the ' +
      'change from the baseline</label> ' : '') +
    '<button id="aflame-reset" hidden>Reset zoom</button> <span class="muted">(click a frame to zoom)</span>' +
    '</div><div class="flame" id="aflame"></div>';
};
// Whether the view weighs everything allocated (totalStacks) rather than what was live.
AllocationFlame.prototype.showsTotals = function () {
  return this.metric === 'totalBytes' || this.metric === 'totalCount';
};
AllocationFlame.prototype.weighsBytes = function () {
  return this.metric === 'bytes' || this.metric === 'totalBytes';
};
AllocationFlame.prototype.roots = function () {
  var self = this, top = { children: {}, order: [] };
  var totals = this.showsTotals();
  var sums = { now: 0, then: 0 };
  (totals ? this.totals : this.stacks).forEach(function (stack, index) {
    var baselines = totals ? self.totalBaselines : self.baselines;
    var base = baselines ? baselines.get(index) : null;
    self.add(top, stack, self.frames, self.weight(stack), base ? self.weight(base) : 0, sums);
  });
  // The baseline's own stacks weigh nothing now: drawn nowhere, they count in their callers'.
  var unmatched = this.unmatched && (totals ? this.totalBaselines : this.baselines) &&
    (totals ? this.unmatched.totalStacks : this.unmatched.persistentStacks);
  if (unmatched) {
    unmatched.forEach(function (stack) {
      self.add(top, stack, self.unmatched.stackFrames || [], 0, self.weight(stack), sums);
    });
  }
  function seal(node) {
    var kids = node.order.sort(function (a, b) { return b.total - a.total; });
    kids.forEach(seal);
    node.children = function () { return kids; };
    return node;
  }
  var roots = seal(top).children();
  return unmatched ? [this.wholeRoot(roots, sums)] : roots;
};
// Bytes or blocks, as the view weighs them.
AllocationFlame.prototype.weight = function (figures) {
  return this.weighsBytes() ? figures.bytes : figures.count;
};
// The run's totals against the baseline's, whatever the stacks kept: the root agrees with
// the comparison table. What no kept stack holds is a frame of its own.
AllocationFlame.prototype.wholeRoot = function (roots, sums) {
  var totals = this.showsTotals(), bytes = this.weighsBytes();
  function whole(t) {
    t = t || {};
    return totals ? (bytes ? t.totalBytes : t.totalAllocations) : (bytes ? t.persistentBytes : t.persistentCount);
  }
  var now = whole(this.wholeNow), then = whole(this.unmatched.totals);
  now = isNum(now) ? now : sums.now;
  then = isNum(then) ? then : sums.then;
  var kids = roots.slice();
  if (now - sums.now > 0 || then - sums.then > 0) {
    var rest = { key: '/(not kept by stack)', name: '(not kept by stack)', module: '', isApp: false, kind: 'frame',
      total: Math.max(0, now - sums.now), baseline: Math.max(0, then - sums.then) };
    rest.children = function () { return []; };
    kids.push(rest);
  }
  var root = { key: '', name: totals ? 'all allocated' : 'all live at the end', module: '', isApp: false,
    kind: 'root', total: now, baseline: then };
  root.children = function () { return kids; };
  return root;
};
// One stack into the tree under `top`: its frames root first, weighed `weight` now and
// `before` in the baseline.
AllocationFlame.prototype.add = function (top, stack, frames, weight, before, sums) {
  var self = this, totals = this.showsTotals();
  sums.now += weight;
  sums.then += before;
  var path = stack.frames.slice().reverse().map(function (index) { return frames[index]; })
    .filter(function (frame) { return frame && (frame.isApp || !self.hideSystemLibraries); })
    .map(function (frame) { return { name: frame.symbol, module: frame.module, isApp: frame.isApp, kind: 'frame' }; });
  if (!totals) {
    path.push({ name: stack.category, module: '', isApp: false, kind: 'category' });
  } else if (!path.length) {
    path.push({ name: '<system libraries>', module: '', isApp: false, kind: 'frame' });
  }
  var node = top, key = '';
  path.forEach(function (step) {
    key += '/' + step.name;
    var child = node.children[step.name];
    if (!child) {
      child = node.children[step.name] = {
        key: key, name: step.name, module: step.module, isApp: step.isApp, kind: step.kind, total: 0,
        baseline: 0, children: {}, order: [],
      };
      node.order.push(child);
    }
    child.total += weight;
    child.baseline += before;
    node = child;
  });
};
AllocationFlame.prototype.attach = function () {
  var self = this;
  $('aflame-bytes').addEventListener('change', function () { self.metric = 'bytes'; self.draw(); });
  $('aflame-count').addEventListener('change', function () { self.metric = 'count'; self.draw(); });
  if ($('aflame-total-bytes')) {
    $('aflame-total-bytes').addEventListener('change', function () { self.metric = 'totalBytes'; self.draw(); });
    $('aflame-total-count').addEventListener('change', function () { self.metric = 'totalCount'; self.draw(); });
  }
  $('aflame-hide').addEventListener('change', function (event) {
    self.hideSystemLibraries = event.target.checked;
    self.zoomKey = null;
    self.draw();
  });
  $('aflame').addEventListener('click', function (event) {
    var g = event.target.closest('g[data-key]');
    if (g) { self.zoomKey = g.dataset.key; self.draw(); }
  });
  $('aflame-reset').addEventListener('click', function () { self.zoomKey = null; self.draw(); });
  if ($('aflame-diff')) {
    $('aflame-diff').addEventListener('change', function (event) {
      self.differential = event.target.checked;
      self.draw();
    });
  }
  this.draw();
};
// Red where more lives under a frame than in the baseline, blue where less, the deeper the
// larger the change against the largest one drawn.
AllocationFlame.prototype.changePaint = function (roots, format) {
  var largest = 0;
  (function walk(rows) {
    rows.forEach(function (row) {
      largest = Math.max(largest, Math.abs(row.total - row.baseline));
      walk(row.children());
    });
  })(roots);
  return function (row) {
    var change = row.total - row.baseline;
    var note = (change > 0 ? '+' : change < 0 ? '-' : '') + format(Math.abs(change)) + ' against the baseline';
    if (change === 0 || largest === 0) return { fill: '#e4e4e8', change: 'same', note: note };
    var light = (92 - Math.min(1, Math.abs(change) / largest) * 40).toFixed(0);
    return change > 0 ? { fill: 'hsl(4,80%,' + light + '%)', change: 'more', note: note }
      : { fill: 'hsl(214,80%,' + light + '%)', change: 'less', note: note };
  };
};
AllocationFlame.prototype.draw = function () {
  var roots = this.roots();
  var zoomed = this.zoomKey !== null ? findRow(roots, this.zoomKey) : null;
  $('aflame-reset').hidden = !zoomed;
  var format = this.weighsBytes() ? bytes : function (n) { return int(n) + ' blocks'; };
  var top = zoomed ? [zoomed] : roots;
  var comparable = this.showsTotals() ? this.totalBaselines : this.baselines;
  var drawn = icicle(top, $('aflame'), format, 'Allocation flame graph',
    this.differential && comparable ? this.changePaint(top, format) : null);
  $('aflame').innerHTML = drawn.rects ? drawn.svg : '<p class="muted">Nothing to draw.</p>';
  $('aflame').dataset.rects = drawn.rects;
  $('aflame').dataset.total = drawn.total;
  $('aflame').dataset.baseline = top.length === 1 && top[0].kind === 'root' ? top[0].baseline : '';
};

var allocationFlame = null;

function allocationsHTML() {
  var a = report.allocations;
  if (!a) return null;
  var t = a.totals || {};
  var html = facts([
    ['Mode', esc(a.mode)],
    ['Allocations', int(t.totalAllocations) + ' (' + bytes(t.totalBytes) + ')'],
    ['Persistent', int(t.persistentCount) + ' (' + bytes(t.persistentBytes) + ')'],
    ['Transient', int(t.transientCount) + ' (' + bytes(t.transientBytes) + ')'],
    ['Peak live heap', bytes(t.peakLiveBytes)],
    ['Live at end', bytes(t.liveBytesAtEnd)],
  ]);
  var lost = a.lost || {};
  var lostParts = Object.keys(lost).filter(function (k) { return lost[k] > 0; });
  if (lostParts.length) {
    html += '<p class="error">Incomplete: ' + lostParts.map(function (k) { return esc(k) + ' ' + int(lost[k]); })
      .join(', ') + ' lost.</p>';
  }
  html += '<h3>Live heap over time</h3><div class="chart" id="heap-chart">' + heapChartSVG(a) + '</div>';
  html += '<h3>Generations</h3>' + generationsHTML(a.generations || []);
  categoryTable = new CategoryTable(a.categories || []);
  html += '<h3>Categories</h3>' + categoryTable.html();
  allocationFlame = new AllocationFlame(a);
  html += '<h3>Live at the end, by allocation stack</h3>' + allocationFlame.html();
  return html;
}

function generationsHTML(generations) {
  if (!generations.length) return '<p class="muted">No generations.</p>';
  return table([
    { title: '#', num: true, html: function (g) { return int(g.index); } },
    { title: 'Generation', html: function (g) {
      var detail = (g.categories || []).map(function (c) {
        return '<details><summary>' + esc(c.name) + ' — ' + bytes(c.growthBytes) + ' in ' + int(c.growthCount) +
          ' blocks</summary>' + stackHTML(c.allocationStack) + '</details>';
      }).join('');
      return esc(g.label) + (detail ? '<div class="gen-categories">' + detail + '</div>' : '');
    } },
    { title: 'Span', num: true, html: function (g) {
      return ms(g.startMilliseconds) + ' – ' + ms(g.endMilliseconds);
    } },
    { title: 'Growth', num: true, html: function (g) { return bytes(g.growthBytes); } },
    { title: '# Growth', num: true, html: function (g) { return int(g.growthCount); } },
    { title: 'Live at mark', num: true, html: function (g) { return bytes(g.liveBytes); } },
  ], generations);
}

// The timeline as an SVG line: at most two points (min and max) per horizontal pixel, with
// each mark drawn as a dashed line and a memory warning in red.
function heapChartSVG(a) {
  var points = a.timeline || [], marks = report.marks || [];
  var width = 1000, height = 250, left = 70, right = 12, top = 40, bottom = 24;
  var end = Math.max(a.durationMilliseconds || 0, points.length ? points[points.length - 1].timeMilliseconds : 0,
    marks.reduce(function (m, k) { return Math.max(m, k.timeMilliseconds); }, 0), 1);
  var peak = points.reduce(function (m, p) { return Math.max(m, p.liveBytes); }, 0) || 1;
  var plotW = width - left - right, plotH = height - top - bottom;
  function X(time) { return left + time / end * plotW; }
  function Y(value) { return top + plotH - value / peak * plotH; }
  var buckets = new Map();
  points.forEach(function (p) {
    var px = Math.round(X(p.timeMilliseconds)), b = buckets.get(px);
    if (!b) buckets.set(px, { first: p.liveBytes, min: p.liveBytes, max: p.liveBytes, last: p.liveBytes });
    else { b.min = Math.min(b.min, p.liveBytes); b.max = Math.max(b.max, p.liveBytes); b.last = p.liveBytes; }
  });
  var line = [];
  buckets.forEach(function (b, px) {
    line.push(px + ',' + Y(b.first).toFixed(1));
    if (b.min !== b.first) line.push(px + ',' + Y(b.min).toFixed(1));
    if (b.max !== b.min) line.push(px + ',' + Y(b.max).toFixed(1));
    line.push(px + ',' + Y(b.last).toFixed(1));
  });
  var svg = '<svg width="' + width + '" height="' + height + '" role="img" aria-label="Live heap over time">';
  svg += '<line class="axis" x1="' + left + '" y1="' + (top + plotH) + '" x2="' + (width - right) + '" y2="' +
    (top + plotH) + '"></line><line class="axis" x1="' + left + '" y1="' + top + '" x2="' + left + '" y2="' +
    (top + plotH) + '"></line>';
  [0, 0.5, 1].forEach(function (f) {
    svg += '<text x="' + (left - 6) + '" y="' + (Y(peak * f) + 4) + '" text-anchor="end">' + esc(bytes(peak * f)) +
      '</text>';
  });
  [0, 0.25, 0.5, 0.75, 1].forEach(function (f) {
    svg += '<text x="' + X(end * f) + '" y="' + (height - 6) + '" text-anchor="middle">' + esc(ms(end * f)) + '</text>';
  });
  if (line.length) {
    svg += '<polygon class="area" points="' + left + ',' + (top + plotH) + ' ' + line.join(' ') + ' ' +
      line[line.length - 1].split(',')[0] + ',' + (top + plotH) + '"></polygon>';
    svg += '<polyline class="heap" points="' + line.join(' ') + '"></polyline>';
  }
  marks.forEach(function (m, i) {
    var x = X(m.timeMilliseconds), cls = m.isMemoryWarning ? 'warning' : 'mark';
    // Labels take turns on three lines and turn left near the right edge, so close marks stay legible.
    var anchor = x > left + plotW * 0.7 ? 'end' : 'start', dx = anchor === 'end' ? -3 : 3;
    svg += '<line class="' + cls + '" x1="' + x.toFixed(1) + '" y1="' + top + '" x2="' + x.toFixed(1) + '" y2="' +
      (top + plotH) + '"><title>' + esc(m.label + ' at ' + ms(m.timeMilliseconds)) + '</title></line>';
    svg += '<text class="' + (m.isMemoryWarning ? 'warning' : '') + '" x="' + (x + dx).toFixed(1) + '" y="' +
      (top - 26 + (i % 3) * 11) + '" text-anchor="' + anchor + '">' +
      esc(truncate((m.isMemoryWarning ? '⚠ ' : '') + m.label, 28)) + '</text>';
  });
  if (!points.length) {
    svg += '<text x="' + (left + 10) + '" y="' + (top + 20) + '">No timeline recorded.</text>';
  }
  return svg + '</svg>';
}

// ---- Leaks: each cycle as a graph, root and indirect leaks as tables. ----
function leaksHTML() {
  var l = report.leaks;
  if (!l) return null;
  var html = facts([
    ['Leaked', int(l.leakedCount) + ' blocks, ' + bytes(l.leakedBytes)],
    ['Indirect', int(l.indirectLeakCount) + ' blocks, ' + bytes(l.indirectLeakBytes)],
    ['Scanned', int(l.blocksScanned) + ' blocks, ' + int(l.edgeCount) + ' references, ' + int(l.threadsScanned) +
      ' threads, in ' + ms(l.scanMilliseconds)],
    ['Suppressed', l.suppressedCount ? int(l.suppressedCount) + ' blocks, ' + bytes(l.suppressedBytes) : null],
    ['Warning', l.unscannedThreads ? '<span class="error">' + int(l.unscannedThreads) +
      ' threads did not stop; results may miss or invent leaks</span>' : null],
  ]);
  var cycles = l.cycles || [];
  html += '<h3>Retain cycles</h3>';
  html += cycles.length ? cycles.map(cycleHTML).join('') : '<p class="muted">No retain cycle leaked.</p>';
  var leakColumns = [
    { title: 'Type', html: function (r) {
      return '<details><summary>' + esc(r.type) + '</summary>' + stackHTML(r.allocationStack) + '</details>';
    } },
    { title: 'Count', num: true, html: function (r) { return int(r.count); } },
    { title: 'Bytes', num: true, html: function (r) { return bytes(r.bytes); } },
  ];
  html += '<h3>Root leaks</h3>' + ((l.rootLeaks || []).length ? table(leakColumns, l.rootLeaks, 500) +
    more(l.rootLeaks, 500) : '<p class="muted">None.</p>');
  html += '<h3>Indirect leaks</h3>' + ((l.indirectLeaks || []).length ? table(leakColumns, l.indirectLeaks, 500) +
    more(l.indirectLeaks, 500) : '<p class="muted">None.</p>');
  if ((l.retainers || []).length) {
    // Xcode's memory graph answers this by clicking an instance; here every type alive at
    // the end shows the shortest paths from a root to its instances.
    html += '<h3 id="retainers">Why is it still alive?</h3>' + table([
      { title: 'Type', html: function (r) { return esc(r.type); } },
      { title: 'Alive', num: true, html: function (r) { return int(r.instances); } },
      { title: 'Shortest paths from a root', html: function (r) {
        return (r.paths || []).map(function (p) {
          var root = p.root.kind === 'global' ? 'global ' + (p.root.name || '?')
            : p.root.kind === 'older block' ? (p.root.name || 'a block') + ' allocated before the recording'
            : "a thread's stack or registers";
          return '<div class="retainer-path">' + int(p.instances) + ' of ' + int(r.examined) + ': ' +
            [esc(root)].concat(p.steps.map(function (s) {
              return (s.reference ? '<span class="mod">(' + esc(s.reference) + ')</span> ' : '') + esc(s.type);
            })).join(' → ') + '</div>';
        }).join('');
      } },
    ], l.retainers, 100) + more(l.retainers, 100);
  }
  if ((l.checks || []).length) {
    html += '<h3>Leak checks during the run</h3>' + table([
      { title: 'Check', html: function (c) { return esc(c.label); } },
      { title: 'At', num: true, html: function (c) { return ms(c.timeMilliseconds); } },
      { title: 'Leaked blocks', num: true, html: function (c) { return int(c.leakedCount); } },
      { title: 'Leaked bytes', num: true, html: function (c) { return bytes(c.leakedBytes); } },
      { title: 'Cycles', num: true, html: function (c) {
        return int((c.cycles || []).reduce(function (sum, cycle) { return sum + cycle.instances; }, 0));
      } },
      { title: 'Cycle types', html: function (c) {
        return (c.cycles || []).map(function (cycle) {
          return esc(cycle.types.join(' → ')) + ' × ' + int(cycle.instances);
        }).join('<br>');
      } },
    ], l.checks);
  }
  return html;
}
function more(rows, limit) {
  return rows.length > limit ? '<p class="muted">… and ' + int(rows.length - limit) + ' more in report.json.</p>' : '';
}

// Drawn in layers left to right, like Graphviz's rankdir=LR: a node's column is its distance
// from the first cycle member along references; neighbours that only point into the cycle
// get a column of their own on the left. References run from a box's right edge to the
// next one's left edge, labelled with the field or capture name and offset; references back
// to an earlier column curve around. Cycle members are red, neighbours dashed grey.
function cycleHTML(cycle, index) {
  var members = cycle.nodes || [], neighbors = (cycle.neighbors || []).slice(0, 40);
  var nodes = members.map(function (n) { return { node: n, neighbor: false, layer: -1 }; })
    .concat(neighbors.map(function (n) { return { node: n, neighbor: true, layer: -1 }; }));
  var edges = (cycle.edges || []).map(function (e) { return { e: e, inCycle: true }; })
    .concat((cycle.neighborEdges || []).map(function (e) { return { e: e, inCycle: false }; }))
    .filter(function (x) { return nodes[x.e.from] && nodes[x.e.to]; });
  var nodeW = 200, nodeH = 36, gapX = 130, gapY = 16, pad = 20;
  if (nodes.length) nodes[0].layer = 0;
  var queue = nodes.length ? [0] : [];
  while (queue.length) {
    var from = queue.shift();
    edges.forEach(function (x) {
      if (x.e.from === from && nodes[x.e.to].layer < 0) {
        nodes[x.e.to].layer = nodes[from].layer + 1;
        queue.push(x.e.to);
      }
    });
  }
  var unplaced = nodes.some(function (n) { return n.layer < 0; });
  nodes.forEach(function (n) { n.layer = n.layer < 0 ? 0 : n.layer + (unplaced ? 1 : 0); });
  var columns = [];
  nodes.forEach(function (n, i) { (columns[n.layer] = columns[n.layer] || []).push(i); });
  var rows = 0;
  // References back (or sideways) arc over the boxes: room above for one arc each, up to five.
  var arcs = edges.filter(function (x) {
    return x.e.from !== x.e.to && nodes[x.e.to].layer !== nodes[x.e.from].layer + 1;
  }).length;
  var boxesTop = pad + 14 + (arcs ? 26 + 14 * Math.min(arcs, 5) : 0);
  columns.forEach(function (column, layer) {
    // Order each column by where its nodes' referrers sit, which untangles most edges.
    column.sort(function (a, b) { return barycenter(a) - barycenter(b) || a - b; });
    column.forEach(function (i, row) {
      nodes[i].x = pad + layer * (nodeW + gapX);
      nodes[i].y = boxesTop + row * (nodeH + gapY);
      nodes[i].row = row;
    });
    rows = Math.max(rows, column.length);
  });
  function barycenter(i) {
    var sum = 0, count = 0;
    edges.forEach(function (x) {
      if (x.e.to === i && nodes[x.e.from].row !== undefined && nodes[x.e.from].layer < nodes[i].layer) {
        sum += nodes[x.e.from].row;
        count++;
      }
    });
    return count ? sum / count : i;
  }
  var width = pad * 2 + columns.length * nodeW + (columns.length - 1) * gapX + 60;
  var height = boxesTop + pad + 14 + rows * (nodeH + gapY) + 4;
  var id = 'arrow' + index;
  var svg = '';
  var arc = 0;
  edges.forEach(function (x, k) {
    var e = x.e, a = nodes[e.from], b = nodes[e.to];
    var label = (e.name ? e.name + ' ' : '') + '+' + e.offset + (e.kind && e.kind !== 'strong' ? ' (' + e.kind + ')' : '');
    var cls = 'edge' + (x.inCycle ? ' incycle' : '') + (e.kind && e.kind !== 'strong' ? ' weakish' : '');
    var x0 = a.x + nodeW, y0 = a.y + nodeH / 2, x3 = b.x, y3 = b.y + nodeH / 2, x1, y1, x2, y2;
    // Parallel references (a field and a closure to the same object) bow apart.
    var twin = edges.slice(0, k).filter(function (y) { return y.e.from === e.from && y.e.to === e.to; }).length;
    if (b.layer === a.layer + 1) {
      x1 = x0 + gapX / 2; y1 = y0 + twin * 24; x2 = x3 - gapX / 2; y2 = y3 + twin * 24;
    } else {
      // Back or sideways: leave to the right, arc over every box, come in from the left
      // (a curve's peak is 3/4 of the way to its control points).
      var peak = boxesTop - 18 - 14 * (arc++ % 5);
      var control = (peak - (y0 + y3) / 8) / 0.75;
      x1 = x0 + 70; y1 = control; x2 = x3 - 70; y2 = control;
      if (e.from === e.to) { y1 = y0 + nodeH + 20; y2 = y0 + nodeH + 20; }
    }
    var lx = (x0 + 3 * x1 + 3 * x2 + x3) / 8, ly = (y0 + 3 * y1 + 3 * y2 + y3) / 8 - 3;
    svg += '<path class="' + cls + '" d="M' + x0.toFixed(1) + ',' + y0.toFixed(1) + ' C' + x1.toFixed(1) + ',' +
      y1.toFixed(1) + ' ' + x2.toFixed(1) + ',' + y2.toFixed(1) + ' ' + x3.toFixed(1) + ',' + y3.toFixed(1) +
      '" marker-end="url(#' + id + ')"><title>' + esc(label) + '</title></path><text class="label" x="' +
      lx.toFixed(1) + '" y="' + ly.toFixed(1) + '" text-anchor="middle">' + esc(truncate(label, 26)) + '</text>';
  });
  nodes.forEach(function (n, i) {
    svg += '<g class="node' + (n.neighbor ? ' neighbor' : '') + '"><title>' + esc('[' + i + '] ' + n.node.type +
      ', ' + n.node.bytes + ' bytes') + '</title><rect x="' + n.x + '" y="' + n.y + '" width="' + nodeW +
      '" height="' + nodeH + '" rx="5"></rect><text x="' + (n.x + 6) + '" y="' + (n.y + 14) + '">' +
      esc(truncate(n.node.type, 31)) + '</text><text x="' + (n.x + 6) + '" y="' + (n.y + 29) + '" class="label">' +
      esc('[' + i + '] ' + int(n.node.bytes) + ' bytes') + '</text></g>';
  });
  svg = '<svg width="' + Math.round(width) + '" height="' + Math.round(height) + '" role="img" ' +
    'aria-label="Cycle ' + (index + 1) + '"><defs><marker id="' + id + '" viewBox="0 0 10 10" refX="10" refY="5" ' +
    'markerWidth="8" markerHeight="8" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#555"></path>' +
    '</marker></defs>' + svg + '</svg>';
  var total = members.reduce(function (s, n) { return s + n.bytes; }, 0);
  var stacks = members.slice(0, 50).map(function (n, i) {
    return '<details><summary>[' + i + '] ' + esc(n.type) + ' allocated at</summary>' +
      stackHTML(n.allocationStack) + '</details>';
  }).join('');
  return '<div class="cycle" data-cycle="' + index + '"><div><strong>Cycle ' + (index + 1) + '</strong> ' +
    '<span class="muted">' + members.length + ' objects, ' + bytes(total) + (cycle.instances > 1 ? ' × ' +
    int(cycle.instances) + ' instances' : '') + (neighbors.length ? ', ' + neighbors.length +
    ' leaked neighbours dashed' : '') + '</span></div><div class="cycle-graph">' + svg + '</div>' +
    (members.length > 3 ? '<details><summary>Allocation stacks of the ' + members.length + ' objects</summary>' +
    stacks + '</details>' : stacks) + '</div>';
}
