// What the node --test files share: a short pause, and a poll until a condition holds
// (bounded, never a timing assertion).

export const tick = (ms = 5) => new Promise((r) => setTimeout(r, ms));

export async function until(pred, what) {
  for (let i = 0; i < 400; i++) {
    if (pred()) return;
    await tick();
  }
  throw new Error(`never: ${what}`);
}
