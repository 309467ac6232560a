// topogang cluster view: polls GET /v1/ui/state with a change token and redraws only what changed.
// Hand-written vanilla JS, no build step. The document format is described in extender/http/ui/state.py.
"use strict";
(function () {
  const POLL_MS = 1000;
  const HIDDEN_POLL_MS = 5000;
  const STATE_NAMES = {
    f: "free",
    u: "used (guaranteed)",
    o: "used (opportunistic)",
    r: "reserved, member not bound yet",
    p: "preempting: reserved, victim still on it",
    b: "bad",
  };
  const LEGEND_ORDER = ["f", "u", "o", "r", "p", "b"];

  const $ = (id) => document.getElementById(id);
  const topoEl = $("topology");
  const tip = $("tip");
  const esc = (s) =>
    String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

  // everything the page knows; exposed for the browser tests as window.topogangUI
  const ui = {
    token: null,
    layoutToken: null,
    polls: 0,
    renders: 0,
    lastRenderMs: 0,
    lastUpdateMs: 0,
    changedGpus: 0,
    gpus: "", // state string
    gpuEls: [],
    gpuNode: [], // GPU position -> node index
    gpuIdx: [], // GPU position -> nvidia-smi index
    gpuChain: [],
    nodes: [], // node names
    nodeEls: [],
    chains: [],
    gpuVc: null, // Int16Array: VC index or -1
    vcNames: [],
    gpuGang: null, // Int32Array: holding gang index or -1
    gpuSlot: null,
    gpuPend: null, // preempting gang index or -1
    gangs: [],
    waiting: [],
    selected: null, // gang name
    highlighted: [],
    serverNow: 0,
    fetchedAt: 0,
    gangsKey: "",
    quotasKey: "",
  };
  window.topogangUI = ui;

  // ------------------------------------------------------------------ layout (once per topology)
  function buildLayout(layout) {
    const t0 = performance.now();
    const html = [];
    const gpuNode = [];
    const gpuIdx = [];
    const gpuChain = [];
    const nodes = [];
    let total = 0;
    for (const ch of layout.chains) total += countNodes(ch[4]) * ch[5].length;
    ui.compact = total > 2048;
    const size = total <= 256 ? 20 : total <= 2048 ? 12 : 8;
    document.documentElement.style.setProperty("--g", size + "px");
    topoEl.classList.toggle("compact", ui.compact);

    layout.chains.forEach((ch, ci) => {
      const [name, leafType, levelTypes, nodeLevel, tops, pattern, exceptions] = ch;
      const chainNodes = [];
      html.push('<div class="chain"><div class="chain-title">' + esc(name) + ' <span class="sub">(' + esc(leafType) + " GPUs) · ");
      const titleAt = html.length;
      html.push("");
      html.push('</span></div><div class="cells">');
      const childNumber = ch[7];
      const walk = (cell, level) => {
        if (typeof cell === "string") {
          const ni = nodes.length;
          nodes.push(cell);
          chainNodes.push(ni);
          const idx = exceptions[cell] || pattern;
          html.push('<div class="node" data-node="' + esc(cell) + '"><div class="lbl">' + esc(cell) + "</div>");
          let k = 0;
          const group = (lvl) => {
            if (lvl === 1) {
              const i = gpuNode.length;
              gpuNode.push(ni);
              gpuIdx.push(idx[k] !== undefined ? idx[k] : k);
              gpuChain.push(ci);
              k += 1;
              html.push('<div class="g s-f" data-i="' + i + '"></div>');
              return;
            }
            html.push('<div class="grp l' + lvl + '">');
            for (let j = 0; j < childNumber[lvl]; j++) group(lvl - 1);
            html.push("</div>");
          };
          group(nodeLevel);
          html.push("</div>");
          return;
        }
        const [address, kids] = cell;
        const nodesBelow = kids.length && typeof kids[0] === "string";
        html.push('<div class="cell"><div class="lbl">' + esc(levelTypes[level]) + " " + esc(cellLabel(address, kids)) + "</div>");
        html.push('<div class="kids' + (nodesBelow ? " nodes" : "") + '">');
        for (const kid of kids) walk(kid, level - 1);
        html.push("</div></div>");
      };
      for (const top of tops) walk(top, levelTypes.length - 1);
      html.push("</div></div>");
      const gpus = chainNodes.length * (pattern.length || 0);
      html[titleAt] = chainNodes.length + " nodes · " + gpus + " GPUs";
    });
    topoEl.innerHTML = html.join("") + '<div class="veil"></div>';
    ui.gpuEls = Array.from(topoEl.getElementsByClassName("g"));
    ui.nodeEls = Array.from(topoEl.getElementsByClassName("node"));
    ui.gpuNode = gpuNode;
    ui.gpuIdx = gpuIdx;
    ui.gpuChain = gpuChain;
    ui.nodes = nodes;
    ui.chains = layout.chains;
    ui.gpus = "f".repeat(gpuNode.length);
    ui.highlighted = [];
    renderLegend();
    ui.lastRenderMs = performance.now() - t0;
  }

  // A cell above node level is named by what an admin recognises: its nodes' common name prefix
  // ("a100-r1-*" for a rack of a100-r1-n1..n4), else its address (HiveD's index path, e.g. "0/1").
  function cellLabel(address, kids) {
    const names = [];
    const walk = (c) => {
      if (typeof c === "string") names.push(c);
      else c[1].forEach(walk);
    };
    kids.forEach(walk);
    if (names.length < 2) return names.length ? names[0] : address;
    let prefix = names[0];
    for (const n of names) {
      let i = 0;
      while (i < prefix.length && i < n.length && prefix[i] === n[i]) i++;
      prefix = prefix.slice(0, i);
    }
    const cut = Math.max(prefix.lastIndexOf("-"), prefix.lastIndexOf("."), prefix.lastIndexOf("_"));
    prefix = cut > 0 ? prefix.slice(0, cut + 1) : "";
    return prefix.length >= 2 ? prefix + "*" : address;
  }

  function countNodes(tops) {
    let n = 0;
    const walk = (c) => {
      if (typeof c === "string") n += 1;
      else c[1].forEach(walk);
    };
    tops.forEach(walk);
    return n;
  }

  function renderLegend() {
    $("legend").innerHTML = LEGEND_ORDER.map(
      (s) => '<span data-state="' + s + '"><i class="s-' + s + '"></i>' + STATE_NAMES[s] + ' <b class="n">0</b></span>'
    ).join("");
  }

  // ------------------------------------------------------------------ per-poll updates
  function applyGpus(next) {
    const prev = ui.gpus;
    const els = ui.gpuEls;
    let changed = 0;
    const n = Math.min(next.length, els.length);
    for (let i = 0; i < n; i++) {
      const c = next.charCodeAt(i);
      if (c !== prev.charCodeAt(i)) {
        els[i].className = "g s-" + next[i] + (els[i].classList.contains("hl") ? " hl" : "");
        changed += 1;
      }
    }
    ui.gpus = next;
    ui.changedGpus = changed;
    return changed;
  }

  function indexGangs(doc) {
    const n = ui.gpuEls.length;
    const gang = new Int32Array(n).fill(-1);
    const slot = new Int32Array(n).fill(-1);
    const pend = new Int32Array(n).fill(-1);
    doc.gangs.forEach((g, gi) => {
      for (const s of g[9]) {
        eachRange(s[2], (p) => {
          gang[p] = gi;
          slot[p] = s[0];
        });
        eachRange(s[3], (p) => {
          pend[p] = gi;
          if (slot[p] < 0) slot[p] = s[0];
        });
      }
    });
    const vc = new Int16Array(n).fill(-1);
    for (const [first, count, v] of doc.vcRuns) vc.fill(v, first, first + count);
    ui.gpuGang = gang;
    ui.gpuSlot = slot;
    ui.gpuPend = pend;
    ui.gpuVc = vc;
    ui.vcNames = doc.vcNames;
    ui.gangs = doc.gangs;
    ui.waiting = doc.waiting;
  }

  function eachRange(ranges, fn) {
    for (let r = 0; r < ranges.length; r += 2) {
      for (let p = ranges[r]; p < ranges[r] + ranges[r + 1]; p++) fn(p);
    }
  }

  function gangGpus(g) {
    const out = [];
    for (const s of g[9]) {
      eachRange(s[2], (p) => out.push(p));
      eachRange(s[3], (p) => out.push(p));
    }
    return out;
  }

  function renderSummary() {
    const counts = { f: 0, u: 0, o: 0, r: 0, p: 0, b: 0 };
    const s = ui.gpus;
    for (let i = 0; i < s.length; i++) counts[s[i]] += 1;
    for (const el of $("legend").children) el.querySelector(".n").textContent = counts[el.dataset.state];
    const used = counts.u + counts.o;
    $("summary").innerHTML =
      "<b>" + ui.nodes.length + "</b> nodes · <b>" + s.length + "</b> GPUs · <b>" + used + "</b> used · <b>" +
      (counts.r + counts.p) + "</b> reserved · <b>" + counts.f + "</b> free · <b>" + counts.b + "</b> bad · <b>" +
      ui.gangs.length + "</b> gangs placed · <b>" + ui.waiting.length + "</b> waiting";
  }

  function renderQuotas(vcs) {
    const key = JSON.stringify(vcs);
    if (key === ui.quotasKey) return;
    ui.quotasKey = key;
    $("quotas").innerHTML = vcs
      .map(([name, quota, used, opp, cells]) => {
        const span = Math.max(quota + opp, 1);
        const pct = (x) => ((100 * x) / span).toFixed(2) + "%";
        const free = Math.max(0, quota - used);
        const rows = cells
          .map(([type, number, per, bound, cellUsed]) => {
            const cap = number * per;
            const w = cap ? ((100 * cellUsed) / cap).toFixed(1) : 0;
            return (
              "<div>" + esc(type) + " × " + number + " <span title='GPUs per cell'>(" + per + " GPUs)</span>: " + bound +
              " bound, " + cellUsed + "/" + cap + " used</div><div class='mini'><div style='width:" + w + "%'></div></div>"
            );
          })
          .join("");
        return (
          '<div class="vc" data-vc="' + esc(name) + '"><div class="vc-head"><span class="vc-name">' + esc(name) +
          '</span><span class="vc-nums"><b>' + used + "</b> / " + quota + " guaranteed GPUs used" +
          (opp ? " · <b>" + opp + "</b> opportunistic (borrowed)" : "") + "</span></div>" +
          '<div class="bar" title="' + used + " of " + quota + " guaranteed GPUs used; " + opp + ' opportunistic">' +
          '<div class="seg-u" style="width:' + pct(Math.min(used, quota)) + '"></div><div class="seg-q" style="width:' +
          pct(free) + '"></div>' + (opp ? '<div class="seg-o" style="width:' + pct(opp) + '"></div>' : "") +
          '</div><div class="vc-cells">' + rows + "</div></div>"
        );
      })
      .join("");
  }

  function serverNow() {
    return ui.serverNow + (performance.now() - ui.fetchedAt) / 1000;
  }

  function fmtAge(sec) {
    sec = Math.max(0, sec);
    if (sec < 60) return Math.floor(sec) + "s";
    if (sec < 3600) return Math.floor(sec / 60) + "m" + String(Math.floor(sec % 60)).padStart(2, "0") + "s";
    if (sec < 86400) return Math.floor(sec / 3600) + "h" + String(Math.floor((sec % 3600) / 60)).padStart(2, "0") + "m";
    return Math.floor(sec / 86400) + "d" + Math.floor((sec % 86400) / 3600) + "h";
  }

  function where(g) {
    const nodes = new Set();
    for (const p of gangGpus(g)) nodes.add(ui.gpuNode[p]);
    const names = Array.from(nodes).map((n) => ui.nodes[n]);
    const list = names.length <= 2 ? names.map(esc).join(", ") : names.length + " nodes";
    return list + " <span class='sub'>(in one " + esc(g[8]) + ")</span>";
  }

  function renderGangs() {
    const key = JSON.stringify([ui.gangs, ui.waiting]) + "|" + $("gang-filter").value + "|" + ui.selected;
    if (key === ui.gangsKey) return;
    ui.gangsKey = key;
    const filter = $("gang-filter").value.trim().toLowerCase();
    const match = (name, vc) => !filter || name.toLowerCase().includes(filter) || vc.toLowerCase().includes(filter);
    const rows = [];
    for (const w of ui.waiting) {
      const [name, vc, prio, pods, since, code, reason] = w;
      if (!match(name, vc)) continue;
      rows.push(
        '<tr class="gang waiting' + (ui.selected === name ? " sel" : "") + '" data-gang="' + esc(name) + '"><td class="name" title="' + esc(name) + '">' +
          esc(name) + "</td><td>" + esc(vc) + "</td><td>" + prio + '</td><td><span class="phase Waiting">Waiting</span></td><td>0/' +
          pods + "</td><td>0</td><td>—</td><td class='age' data-since='" + since + "'>" + fmtAge(serverNow() - since) +
          '</td></tr><tr class="reason" data-gang="' + esc(name) + '"><td colspan="8"><b>' + esc(code) + ":</b> " + esc(reason) + "</td></tr>"
      );
    }
    for (let gi = ui.gangs.length - 1; gi >= 0; gi--) {
      const g = ui.gangs[gi];
      const [name, vc, prio, phase, pods, bound, created] = g;
      if (!match(name, vc)) continue;
      rows.push(
        '<tr class="gang' + (ui.selected === name ? " sel" : "") + '" data-gang="' + esc(name) + '"><td class="name" title="' + esc(name) + '">' + esc(name) +
          "</td><td>" + esc(vc) + "</td><td>" + prio + '</td><td><span class="phase ' + esc(phase) + '">' + esc(phase) +
          "</span></td><td>" + bound + "/" + pods + "</td><td>" + gangGpus(g).length + "</td><td>" + where(g) +
          "</td><td class='age' data-since='" + created + "'>" + fmtAge(serverNow() - created) + "</td></tr>"
      );
    }
    $("gangs").tBodies[0].innerHTML = rows.join("") || '<tr><td colspan="8" class="sub">no gangs</td></tr>';
    $("gang-count").textContent = ui.gangs.length + " placed · " + ui.waiting.length + " waiting";
  }

  function tickAges() {
    const now = serverNow();
    for (const td of $("gangs").querySelectorAll("td.age")) td.textContent = fmtAge(now - Number(td.dataset.since));
  }

  // ------------------------------------------------------------------ selection
  function findGang(name) {
    const gi = ui.gangs.findIndex((g) => g[0] === name);
    return gi >= 0 ? ui.gangs[gi] : null;
  }

  function select(name) {
    ui.selected = name;
    applySelection(true);
    ui.gangsKey = "";
    renderGangs();
  }

  function applySelection(scroll) {
    for (const p of ui.highlighted) ui.gpuEls[p].classList.remove("hl");
    for (const el of topoEl.querySelectorAll(".node.nhl")) el.classList.remove("nhl");
    ui.highlighted = [];
    const box = $("selection");
    if (ui.selected === null) {
      topoEl.classList.remove("focus");
      box.hidden = true;
      return;
    }
    const g = findGang(ui.selected);
    const w = ui.waiting.find((x) => x[0] === ui.selected);
    box.hidden = false;
    topoEl.classList.toggle("focus", g !== null);
    if (g === null) {
      box.innerHTML =
        "<b>" + esc(ui.selected) + "</b>: " + (w ? "waiting, holds no GPUs — " + esc(w[6]) : "gone") +
        '<button type="button" data-clear>clear</button>';
      return;
    }
    const gpus = gangGpus(g);
    const nodes = new Set();
    for (const p of gpus) {
      ui.gpuEls[p].classList.add("hl");
      nodes.add(ui.gpuNode[p]);
    }
    for (const n of nodes) ui.nodeEls[n].classList.add("nhl");
    ui.highlighted = gpus;
    box.innerHTML =
      "<b>" + esc(g[0]) + "</b>: " + gpus.length + " GPUs on " + nodes.size + " node" + (nodes.size === 1 ? "" : "s") +
      " · " + esc(g[3]) + '<button type="button" data-clear>clear</button>';
    if (scroll && gpus.length) ui.gpuEls[gpus[0]].scrollIntoView({ block: "nearest", inline: "nearest" });
  }

  $("gangs").addEventListener("click", (ev) => {
    const tr = ev.target.closest("tr[data-gang]");
    if (!tr) return;
    const name = tr.dataset.gang;
    select(ui.selected === name ? null : name);
  });
  $("selection").addEventListener("click", (ev) => {
    if (ev.target.closest("[data-clear]")) select(null);
  });
  $("gang-filter").addEventListener("input", () => renderGangs());
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape") select(null);
  });
  topoEl.addEventListener("click", (ev) => {
    const el = ev.target.closest(".g");
    if (!el) return;
    const p = Number(el.dataset.i);
    const gi = ui.gpuGang[p] >= 0 ? ui.gpuGang[p] : ui.gpuPend[p];
    select(gi >= 0 ? ui.gangs[gi][0] : null);
  });

  // ------------------------------------------------------------------ hover card
  function describe(p) {
    const node = ui.nodes[ui.gpuNode[p]];
    const ch = ui.chains[ui.gpuChain[p]];
    const st = ui.gpus[p];
    const lines = ["<b>" + esc(node) + "</b> · GPU " + ui.gpuIdx[p] + " <span class='k'>(" + esc(ch[1]) + ")</span>"];
    lines.push("<span class='k'>state</span> " + STATE_NAMES[st]);
    const vc = ui.gpuVc[p];
    if (vc >= 0) lines.push("<span class='k'>quota cell of VC</span> " + esc(ui.vcNames[vc]));
    const gi = ui.gpuGang[p];
    if (gi >= 0) {
      const g = ui.gangs[gi];
      const slot = g[9].find((s) => s[0] === ui.gpuSlot[p]);
      lines.push("<span class='k'>gang</span> " + esc(g[0]) + " <span class='k'>(" + esc(g[3]) + ")</span>");
      lines.push("<span class='k'>pod</span> " + (slot && slot[1] ? esc(slot[1]) : "— (slot " + ui.gpuSlot[p] + " not bound yet)"));
      lines.push("<span class='k'>VC</span> " + esc(g[1]) + " <span class='k'>priority</span> " + g[2] + (g[2] < 0 ? " (opportunistic)" : ""));
    } else if (st !== "f" && st !== "b" && st !== "p") {
      lines.push("<span class='k'>used by a gang the page has not loaded yet</span>");
    }
    const pi = ui.gpuPend[p];
    if (pi >= 0) {
      const g = ui.gangs[pi];
      lines.push("<span class='k'>reserved for preempting gang</span> " + esc(g[0]) + " <span class='k'>(VC</span> " + esc(g[1]) + " <span class='k'>priority</span> " + g[2] + "<span class='k'>)</span>");
    }
    return lines.join("<br>");
  }

  topoEl.addEventListener("mouseover", (ev) => {
    const el = ev.target.closest(".g");
    if (!el) {
      tip.hidden = true;
      return;
    }
    tip.innerHTML = describe(Number(el.dataset.i));
    tip.hidden = false;
    placeTip(ev);
  });
  topoEl.addEventListener("mousemove", (ev) => {
    if (!tip.hidden) placeTip(ev);
  });
  topoEl.addEventListener("mouseleave", () => {
    tip.hidden = true;
  });
  function placeTip(ev) {
    const w = tip.offsetWidth;
    const h = tip.offsetHeight;
    let x = ev.clientX + 14;
    let y = ev.clientY + 14;
    if (x + w > window.innerWidth - 4) x = ev.clientX - w - 10;
    if (y + h > window.innerHeight - 4) y = ev.clientY - h - 10;
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }

  // ------------------------------------------------------------------ polling
  function apply(doc) {
    const t0 = performance.now();
    ui.serverNow = doc.now;
    ui.fetchedAt = t0;
    if (doc.unchanged) return;
    if (doc.layout) {
      buildLayout(doc.layout);
      ui.layoutToken = doc.layoutToken;
    }
    ui.token = doc.token;
    applyGpus(doc.gpus);
    indexGangs(doc);
    renderSummary();
    renderQuotas(doc.vcs);
    renderGangs();
    if (ui.selected !== null || ui.highlighted.length) applySelection(false);
    ui.renders += 1;
    ui.lastUpdateMs = performance.now() - t0;
  }

  function setStatus(ok, text) {
    const el = $("status");
    el.className = "status " + (ok ? "live" : "down");
    el.textContent = text;
  }

  async function poll() {
    let delay = document.hidden ? HIDDEN_POLL_MS : POLL_MS;
    try {
      const q = new URLSearchParams();
      if (ui.token) q.set("token", ui.token);
      if (ui.layoutToken) q.set("layout", ui.layoutToken);
      const r = await fetch("v1/ui/state?" + q.toString(), { cache: "no-store" });
      if (!r.ok) throw new Error("HTTP " + r.status);
      apply(await r.json());
      ui.polls += 1;
      setStatus(true, "live · updated " + new Date().toLocaleTimeString());
    } catch (err) {
      setStatus(false, "disconnected (" + err.message + "), retrying");
      delay = 3000;
    }
    setTimeout(poll, delay);
  }

  setInterval(tickAges, 1000);
  poll();
})();
