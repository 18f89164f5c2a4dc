// ---- Call tree: the same semantics as Sources/PerfHarness/CallTree (CallTree.swift). ----
// Functions are frames with the same name and module; two pseudo functions stand for a
// sample with no app frame under Hide System Libraries and for an empty or bad stack.
function ProfileModel(profile) {
  var frames = profile.frames || [], threads = profile.threads || [], samples = profile.samples || [];
  var ids = new Map(), functions = [], functionOfFrame = new Int32Array(frames.length);
  for (var i = 0; i < frames.length; i++) {
    var f = frames[i], key = f.name + '\u0000' + f.module, id = ids.get(key);
    if (id === undefined) {
      id = functions.length;
      ids.set(key, id);
      functions.push({ name: f.name, module: f.module, isApp: !!f.isApp });
    }
    functionOfFrame[i] = id;
  }
  this.systemLibraries = functions.length;
  functions.push({ name: '<system libraries>', module: '', isApp: false });
  this.unknown = functions.length;
  functions.push({ name: '<unknown>', module: '', isApp: false });
  this.functions = functions;
  this.functionOfFrame = functionOfFrame;
  var harness = new Set(JSON.parse(($('harness-modules') || {}).textContent || '[]'));
  this.isHarness = functions.map(function (fn) { return harness.has(fn.module); });
  this.threads = threads;
  // The harness already merged identical stacks; like CallTree, an entry counts as the
  // samples it stands for.
  var stacks = samples.map(function (sample) {
    return { thread: sample.thread, frames: sample.stack, weight: sample.weight, count: sample.count || 1 };
  });
  this.stacks = stacks;
  this.occurrences = new Int32Array(functions.length);
  this.pathCache = new Map();
}

// Where the program's own code starts in a root-first stack: the first program frame
// under the harness's frames (its runner called the scenario's body there). Above it are
// the process's entry, the command line and the runner, the same in every sample. With no
// program frame under the harness (the harness's own work), the harness's first frame.
ProfileModel.prototype.scenarioEntry = function (frames) {
  var count = this.functionOfFrame.length, harnessAt = -1;
  for (var i = 0; i < frames.length; i++) {
    var id = frames[i] >= 0 && frames[i] < count ? this.functionOfFrame[frames[i]] : this.unknown;
    if (harnessAt < 0) {
      if (this.isHarness[id]) harnessAt = i;
    } else if (this.functions[id].isApp) {
      return i;
    }
  }
  return harnessAt < 0 ? 0 : harnessAt;
};

// The display path of a stack: Start at Scenario, Hide System Libraries, Flatten Recursion,
// then Invert.
ProfileModel.prototype.transform = function (frames, options) {
  var path = [], count = this.functionOfFrame.length, functions = this.functions;
  for (var i = options.startAtScenario ? this.scenarioEntry(frames) : 0; i < frames.length; i++) {
    var f = frames[i];
    var id = f >= 0 && f < count ? this.functionOfFrame[f] : this.unknown;
    if (options.hideSystemLibraries && !functions[id].isApp) continue;
    path.push(id);
  }
  if (!path.length) path.push(options.hideSystemLibraries && frames.length ? this.systemLibraries : this.unknown);
  if (options.flattenRecursion) path = this.collapseRepeats(path);
  if (options.invert) path.reverse();
  return path;
};

// Walking root to leaf, whenever the path ends with a block repeated back to back, the second
// copy goes (A B B C => A B C, A B A B C => A B C); A B C B D stays.
ProfileModel.prototype.collapseRepeats = function (path) {
  var out = [], occurrences = this.occurrences;
  for (var i = 0; i < path.length; i++) {
    out.push(path[i]);
    occurrences[path[i]]++;
    var removed = true;
    while (removed && occurrences[out[out.length - 1]] > 1) {
      removed = false;
      var n = out.length;
      for (var length = 1; length * 2 <= n; length++) {
        var same = true;
        for (var k = 0; k < length; k++) {
          if (out[n - 2 * length + k] !== out[n - length + k]) { same = false; break; }
        }
        if (same) {
          for (var d = n - length; d < n; d++) occurrences[out[d]]--;
          out.length = n - length;
          removed = true;
          break;
        }
      }
    }
  }
  for (var j = 0; j < out.length; j++) occurrences[out[j]] = 0;
  return out;
};

// Transformed paths of every merged stack, cached per combination of the per-sample options.
ProfileModel.prototype.paths = function (options) {
  var key = [options.hideSystemLibraries, options.flattenRecursion, options.invert, options.startAtScenario].join();
  var cached = this.pathCache.get(key);
  if (cached) return cached;
  var self = this;
  cached = this.stacks.map(function (stack) { return self.transform(stack.frames, options); });
  this.pathCache.set(key, cached);
  return cached;
};

// One row of the displayed tree. `children()` builds the row's children when first asked:
// only expanded rows ever cost anything.
function Row(kind, name, module, isApp, total, self, count, key, children) {
  this.kind = kind; this.name = name; this.module = module; this.isApp = isApp;
  this.total = total; this.self = self; this.count = count; this.key = key;
  this.childrenBuilder = children; this.cachedChildren = null;
}
Row.prototype.children = function () {
  if (!this.cachedChildren) this.cachedChildren = this.childrenBuilder ? this.childrenBuilder().sort(heavierFirst) : [];
  return this.cachedChildren;
};
Row.prototype.hasChildren = function () { return this.childrenBuilder ? this.children().length > 0 : false; };
// Heaviest first, ties by name then module: the order of CallTreeNode.heavierFirst.
function heavierFirst(a, b) {
  if (a.total !== b.total) return b.total - a.total;
  if (a.name !== b.name) return a.name < b.name ? -1 : 1;
  if (a.module !== b.module) return a.module < b.module ? -1 : 1;
  return 0;
}

// The tree is never built whole: a row knows the paths through it and its position in each,
// and its children come from grouping those paths by their next function when it is first
// expanded. Opening a page costs the heaviest path and the flame graph's visible frames, not
// one node per distinct stack prefix (millions for 100k deep samples). Paths are visited in
// sample order, so sums are added in the same order as CallTree's.
ProfileModel.prototype.childRows = function (paths, members, offsets, keyPrefix, selfOf, isRoot) {
  var model = this, stacks = this.stacks, groups = new Map(), order = [];
  for (var i = 0; i < members.length; i++) {
    var s = members[i], at = offsets[i] + 1, path = paths[s];
    if (at >= path.length) continue;
    var group = groups.get(path[at]);
    if (!group) {
      group = { fn: path[at], members: [], offsets: [] };
      groups.set(path[at], group);
      order.push(group);
    }
    group.members.push(s);
    group.offsets.push(at);
  }
  return order.map(function (group) {
    var total = 0, end = 0, samples = 0;
    for (var k = 0; k < group.members.length; k++) {
      var weight = stacks[group.members[k]].weight;
      total += weight;
      samples += stacks[group.members[k]].count;
      if (group.offsets[k] === paths[group.members[k]].length - 1) end += weight;
    }
    var fn = model.functions[group.fn], key = keyPrefix + '/' + group.fn;
    return new Row('function', fn.name, fn.module, fn.isApp, total, selfOf(end, total, isRoot),
      samples, key, function () {
        return model.childRows(paths, group.members, group.offsets, key, selfOf, false);
      });
  });
};

// Top Functions: every function a root with the weight of the samples it appears in (once per
// sample), self the weight where it is the leaf; beneath it the tree from its first occurrence.
ProfileModel.prototype.topFunctionRows = function (options, members, paths, keyPrefix, query) {
  var model = this, stacks = this.stacks, n = this.functions.length;
  var total = new Float64Array(n), self = new Float64Array(n), count = new Float64Array(n);
  var lastSeen = new Int32Array(n).fill(-1);
  for (var i = 0; i < members.length; i++) {
    var s = members[i], path = paths[s], w = stacks[s].weight;
    for (var j = 0; j < path.length; j++) {
      var id = path[j];
      if (lastSeen[id] === i) continue;
      lastSeen[id] = i;
      total[id] += w;
      count[id] += stacks[s].count;
    }
    self[options.invert ? path[0] : path[path.length - 1]] += w;
  }
  var childSelf = function (end) { return options.invert ? 0 : end; };
  var rows = [];
  for (var f = 0; f < n; f++) {
    if (count[f] === 0) continue;
    var fn = this.functions[f];
    if (query && !matchesQuery(fn, query)) continue;
    rows.push(new Row('function', fn.name, fn.module, fn.isApp, total[f], self[f], count[f], keyPrefix + '/' + f,
      firstOccurrences(f, keyPrefix + '/' + f)));
  }
  function firstOccurrences(f, key) {
    return function () {
      var through = [], at = [];
      for (var i = 0; i < members.length; i++) {
        var index = paths[members[i]].indexOf(f);
        if (index >= 0) { through.push(members[i]); at.push(index); }
      }
      return model.childRows(paths, through, at, key, childSelf, false);
    };
  }
  return rows;
};

function matchesQuery(fn, query) {
  return fn.name.toLowerCase().indexOf(query) >= 0 || fn.module.toLowerCase().indexOf(query) >= 0;
}

// The groups a view splits samples into: one per thread with Separate by Thread, else one.
ProfileModel.prototype.groups = function (options) {
  var stacks = this.stacks, groups = new Map();
  for (var i = 0; i < stacks.length; i++) {
    var g = options.separateByThread ? stacks[i].thread : -1;
    var list = groups.get(g);
    if (!list) { list = []; groups.set(g, list); }
    list.push(i);
  }
  return groups;
};

// The roots of the tree for `options`. A search `query` (lowercase; '' for none) keeps the
// samples whose stack holds a matching function (Top Functions: the matching functions).
ProfileModel.prototype.roots = function (options, query) {
  var model = this, paths = this.paths(options), rows = [], totalWeight = 0;
  var matching = null;
  if (query && !options.topFunctions) {
    matching = this.functions.map(function (fn) { return matchesQuery(fn, query); });
  }
  var selfOf = function (end, total, isRoot) {
    return options.invert ? (isRoot ? total : 0) : end;
  };
  this.groups(options).forEach(function (members, group) {
    if (matching) {
      members = members.filter(function (s) { return paths[s].some(function (f) { return matching[f]; }); });
    }
    var weight = 0, samples = 0;
    for (var i = 0; i < members.length; i++) {
      weight += model.stacks[members[i]].weight;
      samples += model.stacks[members[i]].count;
    }
    totalWeight += weight;
    var prefix = options.separateByThread ? 't' + group : '';
    var rowsOfGroup = options.topFunctions ? function () {
      return model.topFunctionRows(options, members, paths, prefix, query);
    } : function () {
      return model.childRows(paths, members, members.map(function () { return -1; }), prefix, selfOf, true);
    };
    if (options.separateByThread) {
      if (!members.length) return;
      var thread = model.threads[group];
      rows.push(new Row('thread', thread ? thread.name : 'Thread ' + group, '', false, weight, 0, samples,
        prefix, rowsOfGroup));
    } else {
      rows = rowsOfGroup();
    }
  });
  return { rows: rows.sort(heavierFirst), totalWeight: totalWeight };
};
