extension HTMLReport {
  /// The page's CSS. System frames are grey, as in Instruments; colours carry meaning only
  /// together with text (passed/failed badges say so in words).
  static let styles = #"""
    :root { --fg: #1d1d1f; --muted: #6e6e73; --line: #d9d9de; --bg: #fff; --band: #f5f5f7;
      --accent: #0a64d8; --pass: #1a7f37; --fail: #c4291c; --warn: #b35900; --sys: #8e8e93; }
    * { box-sizing: border-box; }
    body { margin: 0; font: 13px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
      color: var(--fg); background: var(--bg); }
    header.top { position: sticky; top: 0; z-index: 5; display: flex; gap: 16px; align-items: baseline;
      padding: 8px 16px; background: var(--band); border-bottom: 1px solid var(--line); flex-wrap: wrap; }
    header.top h1 { font-size: 16px; margin: 0; }
    nav a { margin-right: 12px; color: var(--accent); text-decoration: none; }
    main { padding: 0 16px 32px; }
    section { margin-top: 8px; }
    .columns table, .columns .facts { margin-top: 0; }
    h2 { font-size: 15px; margin: 18px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
    h3 { font-size: 13px; margin: 14px 0 6px; }
    .muted { color: var(--muted); }
    .error { color: var(--fail); }
    .badge { display: inline-block; padding: 1px 8px; border-radius: 9px; font-weight: 600; font-size: 12px;
      color: #fff; background: var(--muted); }
    .badge.passed { background: var(--pass); } .badge.failed { background: var(--fail); }
    .badge.crashed, .badge.interrupted { background: var(--warn); } .badge.no-checks { background: var(--muted); }
    ul.findings { margin: 6px 0; padding-left: 18px; }
    ul.findings > li { margin: 4px 0; } ul.findings > li.problem { color: var(--fail); font-weight: 600; }
    ul.findings ul { font-weight: normal; color: var(--fg); font-size: 12px; }
    .finding .kind { display: inline-block; min-width: 84px; color: var(--muted); font-weight: normal; }
    .columns { display: flex; gap: 12px 40px; flex-wrap: wrap; align-items: flex-start; }
    .facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 8px 0; }
    .facts dt { color: var(--muted); } .facts dd { margin: 0; }
    table { border-collapse: collapse; margin: 6px 0; }
    th, td { padding: 3px 10px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
    th { background: var(--band); font-weight: 600; white-space: nowrap; }
    th.sortable { cursor: pointer; user-select: none; }
    th.sorted-asc::after { content: " ▲"; } th.sorted-desc::after { content: " ▼"; }
    td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
    tr.failed td { background: #fdecea; }
    .toolbar { display: flex; gap: 14px; align-items: center; flex-wrap: wrap; margin: 6px 0;
      padding: 6px 8px; background: var(--band); border: 1px solid var(--line); border-radius: 6px; }
    .toolbar label { white-space: nowrap; cursor: pointer; }
    input[type=search] { padding: 3px 6px; min-width: 220px; font: inherit; }
    button { font: inherit; cursor: pointer; }
    .calltree { border: 1px solid var(--line); max-height: 560px; overflow: auto; font-size: 12px; }
    .ct-row { display: grid; grid-template-columns: 100px 60px 90px 1fr; white-space: nowrap;
      border-bottom: 1px solid #eee; cursor: default; }
    .ct-row > span { padding: 1px 6px; overflow: hidden; text-overflow: ellipsis; }
    .ct-row > span.num { text-align: right; font-variant-numeric: tabular-nums; }
    .ct-row.head { position: sticky; top: 0; background: var(--band); font-weight: 600; z-index: 1; }
    .ct-row:not(.head):hover { background: #eef4ff; }
    .ct-row.sys .sym, .sys { color: var(--sys); }
    .ct-row.thread .sym { font-weight: 600; }
    .ct-row.match .sym { background: #fff3b0; }
    .ct-row.more .sym { color: var(--accent); cursor: pointer; }
    .twisty { display: inline-block; width: 14px; cursor: pointer; color: var(--muted); }
    .mod { color: var(--muted); margin-left: 6px; }
    .flame { border: 1px solid var(--line); margin-top: 8px; overflow-x: hidden; }
    .flame svg { display: block; }
    .flame text { font-size: 11px; pointer-events: none; fill: #1d1d1f; }
    .flame rect { stroke: #fff; stroke-width: 0.5; cursor: pointer; }
    .chart text { font-size: 11px; fill: var(--muted); }
    .chart .heap { fill: none; stroke: var(--accent); stroke-width: 1.5; }
    .chart .area { fill: #0a64d81a; stroke: none; }
    .chart .mark { stroke: #555; stroke-dasharray: 4 3; }
    .chart .warning { stroke: var(--fail); stroke-width: 2; }
    .chart text.warning { fill: var(--fail); stroke: none; font-weight: 600; }
    .chart .axis { stroke: var(--line); }
    .stack { margin: 4px 0 8px 16px; font: 12px/1.35 ui-monospace, Menlo, Consolas, monospace; }
    .stack div { white-space: nowrap; }
    details > summary { cursor: pointer; }
    .cycle { display: inline-block; vertical-align: top; margin: 0 16px 16px 0; border: 1px solid var(--line);
      border-radius: 6px; padding: 6px; }
    .cycle text { font-size: 11px; }
    .cycle-graph { max-width: calc(100vw - 60px); max-height: 900px; overflow: auto; }
    .cycle .node rect { fill: #fdecea; stroke: var(--fail); stroke-width: 1.5; }
    .cycle .node.neighbor rect { fill: #f5f5f7; stroke: #999; stroke-dasharray: 4 3; }
    .cycle .edge { fill: none; stroke: #555; stroke-width: 1.2; }
    .cycle .edge.incycle { stroke: var(--fail); }
    .cycle .edge.weakish { stroke-dasharray: 2 3; }
    .cycle .label { fill: #333; }
    pre.crash { background: var(--band); padding: 8px; overflow: auto; max-height: 320px; }
    """#
}
