// Tenants' usage: what each holds now on this brain against its quota, and what its jobs
// were metered over the last 30 days. Staff see every tenant; a tenant's key its own.

import { get } from "./api.js";
import { h, table } from "./dom.js";
import { num, when } from "./format.js";

const SHOWN = 100;

export async function render(info) {
  const tenants = info.viewer.staff
    ? await get("/v1/tenants")
    : [await get(`/v1/tenants/${encodeURIComponent(info.viewer.tenant)}`)];
  const shown = tenants.slice(0, SHOWN);
  const [quotas, report] = await Promise.all([
    Promise.all(shown.map((t) => get(`/v1/tenants/${encodeURIComponent(t.id)}/quota`))),
    get("/v1/usage/report"),
  ]);
  const used = (amount, limit, digits = 1) =>
    limit === null ? num(amount, digits) : `${num(amount, digits)} / ${num(limit, digits)}`;
  return h(
    "div",
    { class: "page" },
    h("h2", {}, info.viewer.staff ? "Tenants' usage" : `Usage of tenant ${info.viewer.tenant}`),
    h("h3", {}, "Held now on this brain (used / quota; no quota: unlimited)"),
    tenants.length > SHOWN
      ? h("p", { class: "note" }, `The first ${SHOWN} of ${tenants.length} tenants.`)
      : null,
    table(
      [
        "Tenant",
        "Name",
        "Active requests",
        "CPU cores",
        "Memory GiB",
        "Accelerators",
        "Bandwidth Gbps",
      ],
      shown.map((tenant, i) => {
        const q = quotas[i];
        return [
          h("span", { "data-tenant": tenant.id }, tenant.id),
          tenant.name,
          used(q.used_active_requests, q.active_requests, 0),
          used(q.used_cpu_cores, q.cpu_cores),
          used(q.used_memory_gib, q.memory_gib),
          used(q.used_accelerators, q.accelerators, 3),
          used(q.used_bandwidth_gbps, q.bandwidth_gbps),
        ];
      }),
      { class: "quotas" },
    ),
    h("h3", {}, `Metered from ${when(report.from)} to ${when(report.to)} (jobs that ended)`),
    Object.keys(report.tenants).length
      ? table(
          [
            "Tenant",
            "Jobs",
            "Core-hours",
            "Accelerator-hours",
            "Compute CNY",
            "Network CNY",
            "Cost CNY",
          ],
          Object.entries(report.tenants).map(([id, t]) => [
            id,
            String(t.records),
            num(t.cpu_core_hours, 3),
            num(t.accelerator_hours, 3),
            num(t.compute_cost_cny, 4),
            num(t.network_cost_cny, 4),
            num(t.cost_cny, 4),
          ]),
          { class: "metered" },
        )
      : h("p", {}, "No job ended in the period."),
  );
}
