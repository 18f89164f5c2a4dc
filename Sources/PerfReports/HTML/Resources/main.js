// ---- Drawing the page, timing it, and the #selftest hook. ----
section('findings', 'Findings', findingsHTML);
section('summary', 'Run summary', summaryHTML);
section('comparison', 'Baseline comparison', comparisonHTML);
if (report.timeProfile && report.timeProfile.profile) {
  treeState = new CallTreePanel(new ProfileModel(report.timeProfile.profile));
}
section('time-profile', 'Time Profiler', timeProfileHTML);
if (treeState && $('calltree')) {
  try { treeState.attach(); } catch (error) { console.error('call tree: ' + (error && error.stack || error)); }
}
var treeDrawnAt = performance.now();
section('allocations', 'Allocations', allocationsHTML);
if (categoryTable && $('alloc-table')) {
  try { categoryTable.attach(); } catch (error) { console.error('allocations: ' + (error && error.stack || error)); }
}
if (allocationFlame && $('aflame')) {
  try { allocationFlame.attach(); } catch (error) {
    console.error('allocation flame graph: ' + (error && error.stack || error));
  }
}
section('leaks', 'Leaks', leaksHTML);
var renderedAt = performance.now();
// What `make bench` and the tests read with --dump-dom: milliseconds since navigation start.
document.documentElement.setAttribute('data-parsed-ms', parsedAt.toFixed(1));
document.documentElement.setAttribute('data-tree-ms', treeDrawnAt.toFixed(1));
document.documentElement.setAttribute('data-rendered-ms', renderedAt.toFixed(1));
$('render-time').textContent = 'rendered in ' + Math.round(renderedAt) + ' ms';

if (location.hash === '#selftest') selfTest();

// Toggles each Call Tree option (and a few pairs), searches, sorts and filters, recording what
// the page shows, then writes it all, with every error seen, into #selftest-result as JSON.
function selfTest() {
  var result = { problems: problems, sections: [], states: {}, renderedMs: renderedAt };
  ['findings', 'summary', 'comparison', 'time-profile', 'allocations', 'leaks'].forEach(function (id) {
    if (!$(id).hidden) result.sections.push(id);
  });
  try {
    if (treeState) {
      var snapshot = function () {
        return {
          roots: treeState.roots.slice(0, 12).map(function (r) {
            return { kind: r.kind, name: r.name, module: r.module, total: r.total, self: r.self, count: r.count,
              children: r.children().slice(0, 6).map(function (c) {
                return { name: c.name, module: c.module, total: c.total, self: c.self, count: c.count };
              }) };
          }),
          rowCount: document.querySelectorAll('#calltree .ct-row:not(.head)').length,
          firstRows: Array.prototype.slice.call(document.querySelectorAll('#calltree .ct-row:not(.head) .sym'), 0, 8)
            .map(function (n) { return n.textContent; }),
          flameRects: Number($('flame').dataset.rects || 0),
        };
      };
      var toggle = function (names) {
        names.forEach(function (name) { $('opt-' + name).click(); });
      };
      // The view the page opens with, then every option off: the states below are the
      // Swift CallTree's, which knows no harness folding.
      result.defaultView = snapshot();
      result.defaultView.options = Object.keys(treeState.options).filter(function (k) { return treeState.options[k]; });
      result.defaultView.flameSecondRow = Array.prototype.slice.call(document.querySelectorAll('#flame g'))
        .filter(function (g) { return g.querySelector('rect').getAttribute('y') === '17'; })
        .map(function (g) { return g.querySelector('title').textContent; });
      Object.keys(treeState.options).forEach(function (k) { if (treeState.options[k]) $('opt-' + k).click(); });
      result.states.none = snapshot();
      var combos = OPTIONS.map(function (o) { return [o[0]]; }).concat([
        ['invert', 'hideSystemLibraries'], ['topFunctions', 'hideSystemLibraries'],
        ['separateByThread', 'invert'], ['flattenRecursion', 'hideSystemLibraries'],
        ['topFunctions', 'invert'],
      ]);
      combos.forEach(function (names) {
        toggle(names);
        result.states[names.join('+')] = snapshot();
        toggle(names);
      });
      // Expanding and collapsing the first row.
      var first = document.querySelector('#calltree .ct-row:not(.head)');
      var before = document.querySelectorAll('#calltree .ct-row').length;
      first.click();
      result.collapseChangesRows = document.querySelectorAll('#calltree .ct-row').length !== before;
      first = document.querySelector('#calltree .ct-row:not(.head)');
      first.click();
      var search = $('ct-search'), word = treeState.roots.length ? treeState.roots[0].name.slice(0, 6) : 'x';
      search.value = word;
      search.dispatchEvent(new Event('input'));
      result.search = { query: word, rows: document.querySelectorAll('#calltree .ct-row.match').length };
      search.value = '';
      search.dispatchEvent(new Event('input'));
      if ($('flame-diff')) {
        // Each frame the differential colouring painted: its function and the way it moved.
        result.flameChanges = Array.prototype.slice.call(document.querySelectorAll('#flame g[data-change]'))
          .map(function (g) {
            return { title: g.querySelector('title').textContent, change: g.dataset.change };
          }).slice(0, 500);
      }
      var rect = document.querySelector('#flame g');
      if (rect) {
        rect.querySelector('rect').dispatchEvent(new MouseEvent('click', { bubbles: true }));
        result.flameZoomed = !$('flame-reset').hidden;
        $('flame-reset').click();
      }
    }
    if (categoryTable) {
      var names = function () {
        return Array.prototype.slice.call(document.querySelectorAll('#alloc-categories tbody tr td:first-child'))
          .map(function (n) { return n.textContent; });
      };
      result.allocations = { rows: names().length };
      document.querySelector('#alloc-categories th[data-key="name"]').click();
      result.allocations.sortedByName = names().slice(0, 5);
      var filter = $('alloc-filter');
      filter.value = 'malloc';
      filter.dispatchEvent(new Event('input'));
      result.allocations.filteredRows = names().length;
    }
    if (allocationFlame && $('aflame')) {
      // What each view draws: its total weight, and whether a system frame shows.
      var flameView = function () {
        var frames = Array.prototype.slice.call(document.querySelectorAll('#aflame g[data-kind="frame"]'));
        return {
          rects: Number($('aflame').dataset.rects || 0), total: Number($('aflame').dataset.total || 0),
          systemFrames: frames.filter(function (g) { return g.dataset.app === '0'; }).length,
          appFrames: frames.length - frames.filter(function (g) { return g.dataset.app === '0'; }).length,
          leaves: Array.prototype.slice.call(document.querySelectorAll('#aflame g[data-kind="category"]')).length,
          // Against a baseline, what the root weighs in it.
          baseline: $('aflame').dataset.baseline ? Number($('aflame').dataset.baseline) : null,
        };
      };
      result.allocationFlame = { bytes: flameView() };
      if ($('aflame-diff')) {
        // Each frame the differential colouring painted, and the way what lives under it moved.
        result.allocationFlame.changes = Array.prototype.slice.call(document.querySelectorAll('#aflame g[data-change]'))
          .map(function (g) {
            return { title: g.querySelector('title').textContent, change: g.dataset.change };
          }).slice(0, 500);
      }
      $('aflame-count').click();
      result.allocationFlame.count = flameView();
      if ($('aflame-total-bytes')) {
        $('aflame-total-bytes').click();
        result.allocationFlame.totalBytes = flameView();
        // Against a baseline, the totals' frames painted by the change in what was allocated.
        result.allocationFlame.totalChanges = document.querySelectorAll('#aflame g[data-change]').length;
        $('aflame-total-count').click();
        result.allocationFlame.totalCount = flameView();
      }
      $('aflame-bytes').click();
      $('aflame-hide').click();
      result.allocationFlame.allFrames = flameView();
      $('aflame-hide').click();
      var firstFrame = document.querySelector('#aflame g rect');
      if (firstFrame) {
        firstFrame.dispatchEvent(new MouseEvent('click', { bubbles: true }));
        result.allocationFlame.zoomed = !$('aflame-reset').hidden;
        $('aflame-reset').click();
      }
    }
    result.cycles = document.querySelectorAll('#leaks .cycle svg').length;
  } catch (error) {
    problems.push('self-test: ' + (error && error.stack || error));
  }
  var out = $('selftest-result');
  out.hidden = false;
  out.textContent = JSON.stringify(result);
}
