// The client side every HTTP example runs: a POST, its retry with the same Idempotency-Key, and the
// key reused for a different order. Exits non-zero unless the API created exactly one order.
export async function retryStory(url, countOrders) {
  const post = (body) =>
    fetch(url, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "idempotency-key": '"order-2026-0042"',
        "x-account": "acct_7",
      },
      body: JSON.stringify(body),
    });
  const first = await post({ item: "book", qty: 1 });
  console.log(`first:  HTTP ${first.status} ${await first.text()}`);
  const retry = await post({ item: "book", qty: 1 });
  console.log(
    `retry:  HTTP ${retry.status} Idempotent-Replayed: ${retry.headers.get("idempotent-replayed")} ${await retry.text()}`,
  );
  const reused = await post({ item: "pen", qty: 9 });
  console.log(`reused: HTTP ${reused.status} ${reused.headers.get("content-type")}`);
  const created = countOrders();
  console.log(`orders created: ${created}`);
  if (first.status !== 201 || retry.status !== 201 || reused.status !== 422 || created !== 1) {
    console.error("unexpected: the order was not created exactly once");
    process.exitCode = 1;
  } else {
    console.log("created exactly once");
  }
}
