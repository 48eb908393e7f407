// The web view's only script (grouper/api/ui): keeps the pasted bearer token in sessionStorage, fetches the
// server-rendered fragment of the page in the URL's hash with it, and filters table rows in the browser.
// The server escapes every value in a fragment; this script inserts fragments through one Trusted Types
// policy and writes anything else (errors, options) as text only.
"use strict";

(() => {
  const KEY = "grouper.token";
  const FILTERS = ["namespace", "kind", "state"];
  const TITLES = {401: "401 Unauthorized", 403: "403 Forbidden", 404: "404 Not found"};
  const policy = window.trustedTypes
    ? window.trustedTypes.createPolicy("grouper-fragment", {createHTML: (html) => html})
    : null;
  const $ = (id) => document.getElementById(id);
  const token = () => sessionStorage.getItem(KEY) || "";

  function showTokenState() {
    $("token-state").textContent = token() ? "token set for this tab" : "no token";
  }

  function parseHash() {
    const raw = (location.hash || "#/workloads").slice(1);
    const q = raw.indexOf("?");
    const path = q < 0 ? raw : raw.slice(0, q);
    const params = new URLSearchParams(q < 0 ? "" : raw.slice(q + 1));
    const parts = path.split("/").filter(Boolean).map((p) => {
      try { return decodeURIComponent(p); } catch (e) { return p; }
    });
    return {parts, params};
  }

  // The fragment of the page named by the hash: #/workloads, #/workload/NS/KIND/NAME, #/errors, #/definitions.
  // Relative to the shell's /ui/, so a path prefix a proxy adds is kept.
  function fragmentUrl(parts) {
    const enc = (p) => encodeURIComponent(p);
    switch (parts[0] || "workloads") {
      case "workloads": return {page: "workloads", url: "fragments/workloads"};
      case "workload":
        if (parts.length === 4) {
          return {page: "workloads", url: "fragments/workloads/" + parts.slice(1).map(enc).join("/")};
        }
        return null;
      case "errors": return {page: "errors", url: "fragments/errors"};
      case "definitions": return {page: "definitions", url: "fragments/definitions"};
      default: return null;
    }
  }

  function showError(status, detail) {
    const box = document.createElement("div");
    box.className = "error";
    box.dataset.status = String(status);
    const h = document.createElement("h2");
    h.textContent = TITLES[status] || (status ? "Error " + status : "Error");
    const p = document.createElement("p");
    p.textContent = detail;
    box.append(h, p);
    if (status === 401) {
      const hint = document.createElement("p");
      hint.textContent = "Paste a bearer token above, e.g. from: kubectl create token SERVICEACCOUNT -n NAMESPACE";
      box.append(hint);
    }
    $("content").replaceChildren(box);
    $("filters").hidden = true;
    loaded("error");
  }

  // body[data-load] says where the page is: loading, ready (a fragment shown) or error (a message shown)
  const loaded = (state) => { document.body.dataset.load = state; };

  async function load() {
    loaded("loading");
    const {parts, params} = parseHash();
    const target = fragmentUrl(parts);
    for (const a of document.querySelectorAll("nav a")) {
      a.classList.toggle("current", target !== null && a.dataset.page === target.page);
    }
    if (target === null) {
      showError(404, "No such page: " + location.hash);
      return;
    }
    const headers = {"Accept": "text/html"};
    if (token()) headers["Authorization"] = "Bearer " + token();
    let response;
    try {
      response = await fetch(target.url, {headers, credentials: "omit", cache: "no-store", redirect: "error"});
    } catch (e) {
      showError(0, "Cannot reach the grouper: " + e);
      return;
    }
    if (!response.ok) {
      let detail = response.statusText;
      try { detail = (await response.json()).detail || detail; } catch (e) { /* not JSON: keep the status */ }
      showError(response.status, detail);
      return;
    }
    const html = await response.text();
    $("content").innerHTML = policy ? policy.createHTML(html) : html;
    setUpFilters(params);
    loaded("ready");
  }

  // Filters: select options from the rows' data-namespace / data-kind / data-state, the choice kept in the hash.
  function setUpFilters(params) {
    const rows = Array.from(document.querySelectorAll("#content tbody tr[data-namespace]"));
    $("filters").hidden = rows.length === 0;
    for (const name of FILTERS) {
      const select = $("f-" + name);
      const values = Array.from(new Set(rows.map((r) => r.dataset[name]).filter((v) => v !== undefined && v !== "")));
      values.sort();
      const wanted = params.get(name) || "";
      if (wanted && !values.includes(wanted)) values.push(wanted);
      select.replaceChildren(new Option("all", ""), ...values.map((v) => new Option(v, v)));
      select.value = wanted;
      select.parentElement.hidden = values.length === 0;
    }
    applyFilters();
  }

  function applyFilters() {
    const chosen = {};
    for (const name of FILTERS) chosen[name] = $("f-" + name).value;
    let shown = 0;
    for (const row of document.querySelectorAll("#content tbody tr[data-namespace]")) {
      const match = FILTERS.every((n) => !chosen[n] || row.dataset[n] === chosen[n]);
      row.hidden = !match;
      if (match) shown += 1;
    }
    const counter = $("shown");
    if (counter) counter.textContent = String(shown);
  }

  function onFilterChange() {
    const {parts, params} = parseHash();
    for (const name of FILTERS) {
      const v = $("f-" + name).value;
      if (v) params.set(name, v); else params.delete(name);
    }
    const query = params.toString();
    // replaceState, not location.hash: no reload of the fragment for a filter the browser applies
    history.replaceState(null, "", "#/" + parts.map(encodeURIComponent).join("/") + (query ? "?" + query : ""));
    applyFilters();
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("token-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const value = $("token").value.trim();
      if (value) sessionStorage.setItem(KEY, value);
      $("token").value = "";
      showTokenState();
      load();
    });
    $("forget").addEventListener("click", () => {
      sessionStorage.removeItem(KEY);
      showTokenState();
      load();
    });
    for (const name of FILTERS) $("f-" + name).addEventListener("change", onFilterChange);
    window.addEventListener("hashchange", load);
    showTokenState();
    load();
  });
})();
