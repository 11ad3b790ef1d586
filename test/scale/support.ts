/** Shared by the Scale page's tests: the runner's JSON shape, the generator run on it, an XML check. */
import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const script = fileURLToPath(new URL("../../scripts/scale-page.mjs", import.meta.url));

export type Cell = string | number | boolean | null;
export interface Curve {
  id: string;
  title: string;
  x: { label: string; log?: boolean };
  y: { label: string; log?: boolean };
  series: Array<{ name: string; points: Array<[number, number]> }>;
}
export interface Run {
  cases: Array<{
    id: string;
    title: string;
    summary: string;
    curves: Curve[];
    tables: Array<{ title: string; columns: string[]; rows: Cell[][] }>;
    targets: Array<{ name: string; target: string; value: Cell; met: boolean | null; note: string }>;
  }>;
}

/**
 * A function that runs the generator on a run's JSON (a path, or an object written to a file first)
 * into a fresh folder under `work`.
 */
export function pageGenerator(work: string) {
  let runs = 0;
  return (input: string | object) => {
    const dir = join(work, `out-${++runs}`);
    let file = input as string;
    if (typeof input !== "string") {
      file = join(work, `input-${runs}.json`);
      writeFileSync(file, JSON.stringify(input));
    }
    const md = join(dir, "scale.md");
    const svgDir = join(dir, "svg");
    const child = spawnSync(process.execPath, [script, file, "--out-md", md, "--out-svg-dir", svgDir], {
      encoding: "utf8",
    });
    return { code: child.status, stderr: child.stderr, md, svgDir };
  };
}

/**
 * XML well-formedness, the part an SVG needs: one root element, tags that close in order, quoted and
 * unique attributes, no stray `<` or `&` in text. Throws with the offset of the first fault.
 */
export function checkXml(text: string): string {
  const stack: string[] = [];
  let root = "";
  let i = 0;
  const fault = (what: string) => new Error(`${what} at offset ${i}: ${text.slice(i, i + 40)}`);
  const checkText = (chunk: string) => {
    if (chunk.includes("<")) throw fault("a stray <");
    for (const entity of chunk.match(/&[^;\s]*;?/g) ?? [])
      if (!/^&(amp|lt|gt|quot|apos|#\d+|#x[0-9a-fA-F]+);$/.test(entity))
        throw fault(`a bad entity ${entity}`);
  };
  while (i < text.length) {
    const open = text.indexOf("<", i);
    if (open === -1) {
      if (text.slice(i).trim() !== "") throw fault("text after the root");
      break;
    }
    const chunk = text.slice(i, open);
    if (stack.length === 0 && chunk.trim() !== "") throw fault("text outside the root");
    checkText(chunk);
    i = open;
    if (text.startsWith("<!--", i)) {
      const end = text.indexOf("-->", i);
      if (end === -1) throw fault("an unclosed comment");
      i = end + 3;
      continue;
    }
    if (text.startsWith("<?", i)) {
      const end = text.indexOf("?>", i);
      if (end === -1 || stack.length > 0 || root !== "") throw fault("a misplaced declaration");
      i = end + 2;
      continue;
    }
    const close = /^<\/([A-Za-z][\w:.-]*)\s*>/.exec(text.slice(i));
    if (close) {
      if (stack.pop() !== close[1]) throw fault(`</${close[1]}> closes nothing open`);
      i += close[0].length;
      continue;
    }
    const tag = /^<([A-Za-z][\w:.-]*)((?:\s+[A-Za-z][\w:.-]*\s*=\s*(?:"[^"<]*"|'[^'<]*'))*)\s*(\/?)>/.exec(
      text.slice(i),
    );
    if (!tag) throw fault("a malformed tag");
    const [whole, name, attributes, selfClosing] = tag as unknown as [string, string, string, string];
    if (stack.length === 0) {
      if (root !== "") throw fault("a second root element");
      root = name;
    }
    const names = [...attributes.matchAll(/([A-Za-z][\w:.-]*)\s*=\s*("[^"]*"|'[^']*')/g)].map((m) => {
      checkText((m[2] ?? "").slice(1, -1));
      return m[1];
    });
    if (new Set(names).size !== names.length) throw fault(`<${name}> repeats an attribute`);
    if (selfClosing === "") stack.push(name);
    i += whole.length;
  }
  if (stack.length > 0) throw new Error(`<${stack.join("> <")}> never closed`);
  if (root === "") throw new Error("no root element");
  return root;
}
