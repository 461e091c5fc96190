// The vrag-compress web page. Plain JS, no build step, no CDN. Every piece of data from the
// server (file names, metadata, page text, answers) goes into the page through textContent or
// element attributes, never as HTML, so nothing in a document can run as script here.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { info: null, query: "", explanation: null, regions: [], blobs: [] };

function apiKey() {
  return sessionStorage.getItem("vrag-api-key") || "";
}

function headers(extra) {
  const out = Object.assign({}, extra || {});
  if (apiKey()) out.Authorization = "Bearer " + apiKey();
  return out;
}

// The server's key errors tell API clients to send a header; here the key goes in the key box.
const KEY_HELP = {
  401: "missing or wrong API key: type the server's key in the API key box at the top of the page",
  403: "uploads and deletes are off: start the server with --api-key KEY (or VRAG_API_KEY), " +
    "then type that key in the API key box at the top of the page",
};

async function api(path, options) {
  const opts = Object.assign({}, options || {});
  opts.headers = headers(opts.headers);
  const response = await fetch(path, opts);
  if (!response.ok) {
    let message = response.status + " " + response.statusText;
    try {
      message = (await response.json()).error || message;
    } catch (e) { /* not JSON */ }
    throw new Error(KEY_HELP[response.status] || message);
  }
  return response;
}

async function json(path, options) {
  return (await api(path, options)).json();
}

function el(tag, props, children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (key === "text") node.textContent = value;
    else if (key === "className") node.className = value;
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children || []) node.appendChild(child);
  return node;
}

function pageUrl(pageId, suffix) {
  return "/api/pages/" + encodeURIComponent(pageId) + "/" + suffix;
}

async function loadImage(img, url) {
  // fetch with the key (an <img src> cannot send headers), then show a blob URL
  const blob = await (await api(url)).blob();
  const src = URL.createObjectURL(blob);
  state.blobs.push(src);
  img.src = src;
  await img.decode().catch(() => {});
}

function setStatus(id, text, isError) {
  const node = $(id);
  node.textContent = text;
  node.classList.toggle("error", Boolean(isError));
}

// ------------------------------------------------------------------------------ search

function plural(count, noun) {
  return count + " " + noun + (count === 1 ? "" : "s");
}

function showAlpha() {
  $("alpha-label").hidden = $("mode").value !== "hybrid";
}

function searchParams() {
  const mode = $("mode").value;
  const params = new URLSearchParams({ q: $("q").value, k: $("k").value, mode: mode });
  const alpha = $("alpha").value.trim();
  if (mode === "hybrid" && alpha !== "") params.append("alpha", alpha);
  const filter = $("filter").value.trim();
  if (filter.startsWith("{")) params.append("filter", filter);
  else for (const pair of filter.split(/[,;]/).map((p) => p.trim()).filter(Boolean)) {
    params.append("filter", pair);
  }
  return params;
}

async function search(event) {
  if (event) event.preventDefault();
  const results = $("results");
  state.blobs.forEach((u) => URL.revokeObjectURL(u));
  state.blobs = [];
  results.replaceChildren();
  state.query = $("q").value;
  setStatus("search-status", "searching...");
  let body;
  try {
    body = await json("/api/search?" + searchParams().toString());
  } catch (error) {
    setStatus("search-status", error.message, true);
    return;
  }
  setStatus("search-status", plural(body.hits.length, "page") + " for \u201c" + body.query + "\u201d");
  body.hits.forEach((hit, i) => results.appendChild(card(hit, i + 1, body.snippets[i])));
}

// a picture as the query: the server encodes it as a page (Col* models) or reads its words by
// OCR (text encoders) and says which; the viewer then explains hits by those words, if any
async function imageSearch(event) {
  if (event) event.preventDefault();
  const file = $("image-q").files[0];
  if (!file) {
    setStatus("search-status", "choose an image first", true);
    return;
  }
  const results = $("results");
  state.blobs.forEach((u) => URL.revokeObjectURL(u));
  state.blobs = [];
  results.replaceChildren();
  state.query = "";
  setStatus("search-status", "searching with " + file.name + "...");
  const form = new FormData();
  form.append("image", file);
  form.append("k", $("k").value);
  let body;
  try {
    body = await json("/api/search", { method: "POST", body: form });
  } catch (error) {
    setStatus("search-status", error.message, true);
    return;
  }
  const read = body.image_query;
  let status = plural(body.hits.length, "page") + " like " + file.name;
  if (read.read_by === "ocr") {
    state.query = read.ocr_text;
    status += " \u00b7 its words read by OCR: \u201c" + read.ocr_text + "\u201d";
  }
  setStatus("search-status", status);
  body.hits.forEach((hit, i) => results.appendChild(card(hit, i + 1, body.snippets[i])));
}

function displayName(hit) {
  return (hit.metadata && hit.metadata.filename) || hit.doc_id;
}

function card(hit, rank, snippet) {
  const img = el("img", { alt: "page " + hit.page_no + " of " + displayName(hit), loading: "lazy" });
  const node = el("div", { className: "card", tabIndex: 0, "data-page-id": hit.page_id }, [
    img,
    el("div", { className: "name", text: rank + ". " + displayName(hit) }),
    el("div", { className: "muted", text: "page " + hit.page_no + " \u00b7 score " +
      hit.score.toFixed(3) }),
  ]);
  // text and hybrid hits say which side found them: "text + visual", "text" or "visual"
  const sides = Object.keys(hit.components || {}).sort();
  if (sides.length) node.appendChild(el("div", { className: "found-by muted",
    text: "found by " + sides.join(" + ") }));
  node.appendChild(el("div", { className: "snippet", text: snippet }));
  loadImage(img, pageUrl(hit.page_id, "image?max_side=400")).catch(() => {});
  const title = displayName(hit) + ", page " + hit.page_no;
  const open = () => openViewer(hit.page_id, title, snippet);
  node.addEventListener("click", open);
  node.addEventListener("keydown", (e) => { if (e.key === "Enter") open(); });
  return node;
}

// ------------------------------------------------------------------------------ page viewer

async function openViewer(pageId, title, snippet, focusRegion) {
  $("viewer").hidden = false;
  $("viewer").dataset.state = "loading";
  $("viewer-title").textContent = title;
  $("page-text").textContent = snippet || "";
  $("token-list").replaceChildren();
  $("viewer-score").textContent = "";
  state.explanation = null;
  state.regions = focusRegion ? [focusRegion] : [];
  enableDrawing(true);
  if ($("text-match-note")) $("text-match-note").remove();
  const img = $("page-image");
  try {
    await loadImage(img, pageUrl(pageId, "image"));
    if (state.query) {
      state.explanation = await json(pageUrl(pageId, "explain?q=" +
        encodeURIComponent(state.query)));
      if (!focusRegion) state.regions = state.explanation.regions;
      showTokens(state.explanation);
      if (!state.explanation.grid) showMatchedWords(state.explanation, snippet || "");
    }
  } catch (error) {
    $("viewer-score").textContent = error.message;
  }
  draw();
  $("viewer").dataset.state = "ready";
}

function showTokens(explanation) {
  // tokenizer markers ([CLS], <|endoftext|>) count in the score but are no query term
  const markers = explanation.tokens.filter((t) => t.special).length;
  $("viewer-score").textContent = "score " + explanation.score.toFixed(3) + " = sum of " +
    explanation.tokens.length + " query-token contributions" +
    (markers ? " (" + markers + " of them tokenizer markers, not listed)" : "") +
    (explanation.layout || explanation.reads === "text" ? "" :
      " (no patch layout stored for this page)");
  const list = $("token-list");
  const tokens = explanation.tokens.filter((t) => !t.special)
    .sort((a, b) => b.contribution - a.contribution);
  for (const token of tokens.slice(0, 40)) {
    const label = token.label === null ? "#" + token.token : JSON.stringify(token.label);
    list.appendChild(el("li", { text: label + " \u2192 vector " + token.vector + ": " +
      token.contribution.toFixed(3) + " (" + token.patches.length + " patches)" }));
  }
}

// Heatmap, compression overlay and regions need a patch grid; a text encoder's pages (and pages
// stored without a layout) have none, so their toggles are switched off and say why.
function enableDrawing(on, why) {
  for (const id of ["toggle-heat", "toggle-overlay", "toggle-regions"]) {
    $(id).disabled = !on;
    $(id).parentElement.title = on ? "" : why;
  }
  $("legend").hidden = !on;
}

// A text encoder matched the page's words: show them marked in the page text instead.
function showMatchedWords(explanation, text) {
  const words = explanation.matched_words || [];
  enableDrawing(false, explanation.reads === "text" ?
    "this index's encoder reads page text, not the image: it has no patches to draw" :
    "no patch layout is stored for this page");
  const note = explanation.reads === "text" ?
    "This index's encoder reads page text: " + (words.length ?
      "the words that matched are marked in the text below." :
      "none of the query's words appear in the text below as written.") :
    "No patch layout is stored for this page.";
  $("token-list").before(el("p", { text: note, className: "muted", id: "text-match-note" }));
  const target = $("page-text");
  target.replaceChildren();
  const pattern = words.length ? new RegExp("\\b(" + words.map(escapeRegExp).join("|") + ")\\b",
    "gi") : null;
  let last = 0;
  for (const match of pattern ? text.matchAll(pattern) : []) {
    target.append(text.slice(last, match.index), el("mark", { text: match[0] }));
    last = match.index + match[0].length;
  }
  target.append(text.slice(last));
}

function escapeRegExp(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

const RAMP = [[0, 0, 4], [87, 16, 110], [188, 55, 84], [249, 142, 9], [252, 255, 164]];

function rampColour(t) {
  const x = Math.max(0, Math.min(1, t)) * (RAMP.length - 1);
  const i = Math.min(RAMP.length - 2, Math.floor(x));
  const f = x - i;
  return RAMP[i].map((c, j) => Math.round(c + (RAMP[i + 1][j] - c) * f));
}

function draw() {
  const img = $("page-image");
  const canvas = $("page-canvas");
  canvas.width = img.naturalWidth || 1;
  canvas.height = img.naturalHeight || 1;
  const ctx = canvas.getContext("2d");
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  const ex = state.explanation;
  let cells = 0;
  if (ex && ex.grid) {
    const [rows, cols] = ex.grid;
    const w = canvas.width / cols;
    const h = canvas.height / rows;
    if ($("toggle-overlay").checked && ex.overlay) drawOverlay(ctx, ex.overlay, w, h);
    if ($("toggle-heat").checked && ex.heat) {
      const peak = Math.max(...ex.heat.flat());
      $("legend-max").textContent = peak.toFixed(3);
      ex.heat.forEach((row, r) => row.forEach((value, c) => {
        if (value <= 0 || peak <= 0) return;
        const [red, green, blue] = rampColour(value / peak);
        ctx.fillStyle = "rgba(" + red + "," + green + "," + blue + "," +
          (0.25 + 0.55 * value / peak) + ")";
        ctx.fillRect(c * w, r * h, w, h);
        cells += 1;
      }));
    }
  }
  if ($("toggle-regions").checked) {
    ctx.strokeStyle = "#00c8ff";
    ctx.lineWidth = Math.max(2, canvas.width / 300);
    for (const region of state.regions || []) {
      ctx.strokeRect(region.x0 * canvas.width, region.y0 * canvas.height,
        (region.x1 - region.x0) * canvas.width, (region.y1 - region.y0) * canvas.height);
    }
  }
  canvas.dataset.heatCells = String(cells);
}

function drawOverlay(ctx, overlay, w, h) {
  const cols = overlay.grid[1];
  const total = overlay.grid[0] * cols;
  const box = (i) => [(i % cols) * w, Math.floor(i / cols) * h, w, h];
  if (overlay.kept) {
    const kept = new Set(overlay.kept);
    ctx.fillStyle = "rgba(255,255,255,0.55)";
    for (let i = 0; i < total; i++) if (!kept.has(i)) ctx.fillRect(...box(i));
    ctx.strokeStyle = "#dc1e1e";
    ctx.lineWidth = 2;
    for (const i of kept) ctx.strokeRect(...box(i));
  } else if (overlay.assignment) {
    overlay.assignment.forEach((rep, i) => {
      ctx.fillStyle = "hsla(" + Math.round((rep * 0.618034 % 1) * 360) + ",85%,55%,0.35)";
      ctx.fillRect(...box(i));
    });
  }
}

function closeViewer() {
  $("viewer").hidden = true;
}

// ------------------------------------------------------------------------------ upload

async function upload(file) {
  if (!file) {
    setStatus("upload-status", "choose a file first", true);
    return;
  }
  const form = new FormData();
  form.append("file", file);
  // a protected PDF's password: sent with this upload only, never kept in the page or server
  const password = $("upload-password").value;
  if (password) form.append("password", password);
  $("upload-password").value = "";
  const bar = $("upload-progress");
  bar.hidden = false;
  bar.value = 0;
  setStatus("upload-status", "uploading " + file.name + "...");
  let job;
  try {
    job = await json("/api/documents", { method: "POST", body: form });
  } catch (error) {
    setStatus("upload-status", error.message, true);
    bar.hidden = true;
    return;
  }
  await poll(job.job);
}

async function poll(jobId) {
  const bar = $("upload-progress");
  for (;;) {
    let job;
    try {
      job = await json("/api/jobs/" + encodeURIComponent(jobId));
    } catch (error) {
      setStatus("upload-status", error.message, true);
      return;
    }
    bar.max = Math.max(1, job.pages_total);
    bar.value = job.pages_done;
    bar.dataset.state = job.state;
    const failures = job.failures.map((f) => f.reason).join("; ");
    setStatus("upload-status", job.filename + ": " + job.state + ", " + job.pages_done + "/" +
      job.pages_total + " pages" + (failures ? " \u2014 failed: " + failures : "") +
      (job.error ? " \u2014 " + job.error : ""), job.state === "failed");
    if (job.state === "done" || job.state === "failed") {
      refreshDocuments();
      refreshInfo();
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

async function refreshDocuments() {
  const list = $("documents");
  let body;
  try {
    body = await json("/api/documents");
  } catch (error) {
    list.replaceChildren(el("li", { className: "error", text: error.message }));
    return;
  }
  list.replaceChildren(...body.documents.map((doc) => {
    const label = doc.filename || doc.doc_id;
    const remove = el("button", { type: "button", className: "delete", text: "delete" });
    remove.addEventListener("click", async () => {
      if (!window.confirm("Delete " + label + " (" + plural(doc.n_pages || 0, "page") +
        ") from the index? This cannot be undone.")) return;
      try {
        await api("/api/documents/" + encodeURIComponent(doc.doc_id), { method: "DELETE" });
        refreshDocuments();
        refreshInfo();
      } catch (error) {
        setStatus("upload-status", error.message, true);
      }
    });
    const name = label + " (" + plural(doc.n_pages || 0, "page") +
      (doc.complete ? "" : ", incomplete") + ")";
    return el("li", { "data-doc-id": doc.doc_id }, [el("span", { text: name }), remove]);
  }));
}

// ------------------------------------------------------------------------------ ask

async function ask(event) {
  event.preventDefault();
  const answer = $("ask-answer");
  const cited = $("citations");
  answer.textContent = "";
  cited.replaceChildren();
  state.query = $("ask-q").value;
  let response;
  try {
    response = await api("/api/ask", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ question: state.query, k: 3 }),
    });
  } catch (error) {
    answer.textContent = error.message;
    return;
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n")) >= 0) {
      const event = JSON.parse(buffer.slice(0, cut));
      buffer = buffer.slice(cut + 1);
      if (event.type === "token") answer.textContent += event.text;
      else if (event.type === "citations") event.citations.forEach((c) => cited.appendChild(citation(c)));
      else if (event.type === "error") answer.textContent += "\n" + event.error;
    }
  }
}

function citation(entry) {
  const label = "[" + entry.ref + "] " + (entry.filename || entry.doc_id) + ", page " +
    entry.page_no;
  const item = el("li", {}, [el("a", { text: label, href: "#", "data-page-id": entry.page_id })]);
  item.firstChild.addEventListener("click", (e) => {
    e.preventDefault();
    openViewer(entry.page_id, label, null);
  });
  for (const region of entry.regions || []) {
    const text = "region x " + Math.round(region.x0 * 100) + "\u2013" + Math.round(region.x1 * 100) +
      "%, y " + Math.round(region.y0 * 100) + "\u2013" + Math.round(region.y1 * 100) + "%";
    const link = el("a", { text: " " + text, href: "#" });
    link.addEventListener("click", (e) => {
      e.preventDefault();
      openViewer(entry.page_id, label, null, region);
    });
    item.appendChild(link);
  }
  return item;
}

// ------------------------------------------------------------------------------ start

async function refreshInfo() {
  try {
    state.info = await json("/api/info");
  } catch (error) {
    setStatus("search-status", error.message, true);
    return;
  }
  const info = state.info;
  $("index-info").textContent = plural(info.pages, "page") + " \u00b7 " +
    plural(info.documents, "document") + " \u00b7 " + info.model_id + " \u00b7 " + info.compressor;
  $("ask-section").hidden = !info.server.llm;
}

function start() {
  $("api-key").value = apiKey();
  $("api-key").addEventListener("change", () => {
    sessionStorage.setItem("vrag-api-key", $("api-key").value.trim());
    refreshInfo();
    refreshDocuments();
  });
  $("search-form").addEventListener("submit", search);
  $("image-search-form").addEventListener("submit", imageSearch);
  $("mode").addEventListener("change", showAlpha);
  showAlpha();
  $("ask-form").addEventListener("submit", ask);
  $("viewer-close").addEventListener("click", closeViewer);
  document.addEventListener("keydown", (e) => { if (e.key === "Escape") closeViewer(); });
  for (const id of ["toggle-heat", "toggle-overlay", "toggle-regions"]) {
    $(id).addEventListener("change", draw);
  }
  $("upload-button").addEventListener("click", () => upload($("upload-file").files[0]));
  const zone = $("drop-zone");
  zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (e) => {
    e.preventDefault();
    zone.classList.remove("over");
    upload(e.dataTransfer.files[0]);
  });
  refreshInfo();
  refreshDocuments();
}

document.addEventListener("DOMContentLoaded", start);
