// Calls to the brain: its REST API (/v1/...) and the console's own JSON (api/...), with the
// API key kept in this tab's sessionStorage.

const KEY = "cnbrain.console.key";

export const key = () => sessionStorage.getItem(KEY);
export const setKey = (value) => sessionStorage.setItem(KEY, value);
export const forgetKey = () => sessionStorage.removeItem(KEY);

/** An answer other than 2xx: its status and the problem's detail. */
export class ApiError extends Error {
  constructor(status, detail) {
    super(`${status}: ${detail}`);
    this.status = status;
    this.detail = detail;
  }
}

/** GET `path` (relative to the console, or absolute) with `params`; the JSON answer. */
export async function get(path, params = {}) {
  const url = new URL(path, location.href);
  for (const [name, value] of Object.entries(params)) {
    if (value !== null && value !== undefined) url.searchParams.set(name, value);
  }
  const answer = await fetch(url, {
    headers: { Authorization: `Bearer ${key()}`, Accept: "application/json" },
  });
  if (!answer.ok) {
    let detail = answer.statusText;
    try {
      detail = (await answer.json()).detail ?? detail;
    } catch {
      // not JSON: the status text says it
    }
    throw new ApiError(answer.status, typeof detail === "string" ? detail : JSON.stringify(detail));
  }
  return answer.json();
}
