// The execution panel of `lattice serve` (docs/panel.md): a page per location hash,
// `#/` (the runs and the new-run form), `#/runs/<id>?node=<nodeId>` (one run) and
// `#/compare/<a>/<b>` (two runs side by side).

import { CompareView } from "./compare.js";
import { clear } from "./dom.js";
import { HomeView } from "./runs.js";
import { RunView, stats } from "./runview.js";

const main = document.getElementById("main");
let view = null;

function navigate(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

function parse() {
  const raw = location.hash.replace(/^#/, "") || "/";
  const [path, query] = raw.split("?");
  const params = new URLSearchParams(query || "");
  const run = /^\/runs\/([^/]+)\/?$/.exec(path);
  if (run) return { name: "run", runId: decodeURIComponent(run[1]), node: params.get("node") };
  const compare = /^\/compare\/([^/]+)\/([^/]+)\/?$/.exec(path);
  if (compare) return { name: "compare", a: decodeURIComponent(compare[1]), b: decodeURIComponent(compare[2]) };
  return { name: "home" };
}

function route() {
  view?.destroy();
  const where = parse();
  clear(main);
  if (where.name === "compare") {
    view = new CompareView({ a: where.a, b: where.b });
    document.title = `Compare ${where.a} and ${where.b} · Lattice`;
  } else if (where.name === "run") {
    view = new RunView({ runId: where.runId, node: where.node, navigate });
    document.title = `Run ${where.runId} · Lattice`;
  } else {
    view = new HomeView({ navigate });
    document.title = "Runs · Lattice";
  }
  main.append(view.el);
  window.latticePanel.view = view;
  view.start();
}

let current = location.hash;
window.latticePanel = { stats, view: null };
window.addEventListener("hashchange", () => {
  if (location.hash && !location.hash.startsWith("#/")) {
    // An in-page link (the skip link): focus its target, keep the page where it was.
    document.getElementById(location.hash.slice(1))?.focus();
    history.replaceState(null, "", current || "#/");
    return;
  }
  current = location.hash;
  route();
});
route();
