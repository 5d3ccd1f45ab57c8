// The cases of deepagents' sandbox standard tests
// (@langchain/sandbox-standard-tests 2.0: lifecycle, command execution,
// file operations, write, read, edit, ls, grep, glob, initialFiles,
// integration; 93 cases), written for node:test against a live Tether and
// the real deepagents package. That suite is not published to npm, so
// each case is followed here, one by one, under the same name. Like the
// suite, it takes a wiring: resolvePath turns a file name into the path
// the cases use, absolute (/workspace/NAME, as Modal's wiring) or relative
// (NAME, as Daytona's). Run it once per wiring (standard-*.test.ts).
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { TetherSandbox } from "../src/deepagents.js";
import { bytes, liveClient, text } from "./helpers.js";

export interface Wiring {
  /** The wiring's name, shown in the suite's. */
  name: string;
  /** The path the cases use for a file name. */
  resolvePath: (name: string) => string;
}

const client = liveClient();

/** Registers the standard cases for one wiring. */
export function standardSuite(wiring: Wiring): void {
  const p = wiring.resolvePath;
  const make = (initialFiles?: Record<string, string>) =>
    TetherSandbox.create({ client, provider: "local", labels: { suite: `ts-standard-${wiring.name}` }, initialFiles });

  describe(`TetherSandbox standard cases (${wiring.name} paths)`, () => {
    let shared: TetherSandbox;
    before(async () => {
      shared = await make();
    });
    after(async () => {
      await shared.close();
    });

    describe("sandbox lifecycle", () => lifecycleCases(() => shared, make));
    describe("command execution", () => commandCases(() => shared));
    describe("file operations", () => fileOperationCases(() => shared, p));
    describe("write", () => writeCases(() => shared, p));
    describe("read", () => readCases(() => shared, p));
    describe("edit", () => editCases(() => shared, p));
    describe("ls", () => lsCases(() => shared, p));
    describe("grep", () => grepCases(() => shared, p));
    describe("glob", () => globCases(() => shared, p));
    describe("initialFiles", () => initialFilesCases(make, p));
    describe("integration workflows", () => integrationCases(() => shared, p));
  });
}

type Get = () => TetherSandbox;
type Make = (initialFiles?: Record<string, string>) => Promise<TetherSandbox>;
type Resolve = (name: string) => string;

/** The lines line(0) … line(n-1), joined by newlines (no final one). */
const rows = (n: number, line: (i: number) => string): string => Array.from({ length: n }, (_, i) => line(i)).join("\n");

async function cat(sb: TetherSandbox, path: string): Promise<string> {
  return (await sb.execute(`cat '${path}'`)).output;
}

function lifecycleCases(shared: Get, make: Make): void {
  it("should create sandbox and have a valid id", () => {
    assert.equal(typeof shared().id, "string");
    assert.ok(shared().id.length > 0);
  });
  it("should have isRunning as true after creation", () => {
    assert.equal(shared().isRunning, true);
  });
  it("should close sandbox successfully", async () => {
    const sb = await make();
    assert.equal(sb.isRunning, true);
    await sb.close();
    assert.equal(sb.isRunning, false);
  });
  it("should work with two-step initialization", async (t) => {
    const sb = new TetherSandbox({ client, provider: "local" });
    t.after(() => sb.close());
    assert.equal(sb.isRunning, false);
    await sb.initialize();
    assert.equal(sb.isRunning, true);
    assert.ok(sb.id);
  });
}

function commandCases(shared: Get): void {
  it("should run a simple echo command", async () => {
    assert.deepEqual(await shared().execute('echo "hello"'), { output: "hello\n", exitCode: 0, truncated: false });
  });
  it("should capture non-zero exit code", async () => {
    assert.equal((await shared().execute("exit 42")).exitCode, 42);
  });
  it("should capture multiline output", async () => {
    const r = await shared().execute('echo "line1" && echo "line2" && echo "line3"');
    assert.equal(r.exitCode, 0);
    assert.equal(r.output, "line1\nline2\nline3\n");
  });
  it("should capture stderr output", async () => {
    assert.match((await shared().execute('echo "error message" >&2')).output, /error message/);
  });
  it("should handle command with environment variables", async () => {
    const r = await shared().execute('export MY_VAR="test_value" && echo $MY_VAR');
    assert.equal(r.exitCode, 0);
    assert.equal(r.output.trim(), "test_value");
  });
  it("should handle non-existent command", async () => {
    assert.notEqual((await shared().execute("nonexistent_command_12345")).exitCode, 0);
  });
}

function fileOperationCases(shared: Get, p: Resolve): void {
  it("should upload files to sandbox", async () => {
    const path = p("test-upload.txt");
    assert.deepEqual(await shared().uploadFiles([[path, bytes("Hello from test file!")]]), [{ path, error: null }]);
    assert.equal((await cat(shared(), path)).trim(), "Hello from test file!");
  });
  it("should download files from sandbox", async () => {
    const path = p("test-download.txt");
    await shared().uploadFiles([[path, bytes("Download test content")]]);
    const [got, ...more] = await shared().downloadFiles([path]);
    assert.equal(more.length, 0);
    assert.equal(got?.error, null);
    assert.equal(text(got?.content ?? bytes("")), "Download test content");
  });
  it("should handle file not found on download", async () => {
    const path = p("nonexistent-file-12345.txt");
    assert.deepEqual(await shared().downloadFiles([path]), [{ path, content: null, error: "file_not_found" }]);
  });
  it("should use inherited read method from BaseSandbox", async () => {
    const path = p("read-test.txt");
    await shared().uploadFiles([[path, bytes("Read test content")]]);
    assert.match(String((await shared().read(path)).content), /Read test content/);
  });
  it("should use inherited write method from BaseSandbox", async () => {
    const path = p("write-test.txt");
    await shared().write(path, "Written via BaseSandbox");
    assert.equal((await cat(shared(), path)).trim(), "Written via BaseSandbox");
  });
  it("should use inherited edit method from BaseSandbox", async () => {
    const path = p("edit-test.txt");
    await shared().write(path, "Hello World");
    await shared().edit(path, "Hello World", "Hello Edited World");
    assert.equal((await cat(shared(), path)).trim(), "Hello Edited World");
  });
  it("should upload multiple files at once", async () => {
    const paths = ["multi1.txt", "multi2.txt", "multi3.txt"].map(p);
    const up = await shared().uploadFiles(paths.map((path, i) => [path, bytes(`Content ${i + 1}`)]));
    assert.deepEqual(up.map((u) => u.error), [null, null, null]);
    const out = (await shared().execute(`cat ${paths.join(" ")}`)).output;
    assert.equal(out, "Content 1Content 2Content 3");
  });
}

function writeCases(shared: Get, p: Resolve): void {
  /** Writes content to path and checks the result and what cat reads back. */
  const roundTrip = async (path: string, content: string, readBack = path) => {
    const r = await shared().write(path, content);
    assert.equal(r.error, undefined);
    assert.equal((await cat(shared(), readBack)).trim(), content.trim());
    return r;
  };
  it("should write a new file with basic content", async () => {
    const path = p("wt-new.txt");
    assert.equal((await roundTrip(path, "Hello, sandbox!\nLine 2\nLine 3")).path, path);
  });
  it("should create parent directories automatically", async () => {
    await roundTrip(p("wt-parents/deep/nested/dir/file.txt"), "Nested file content");
  });
  it("should overwrite an existing file", async () => {
    const path = p("wt-existing.txt");
    await shared().write(path, "First content");
    await roundTrip(path, "Second content");
  });
  it("should handle special characters and escape sequences", async () => {
    await roundTrip(p("wt-special.txt"), "Special chars: $VAR, `command`, $(subshell)\nTab\there\nBackslash: \\");
  });
  it("should write an empty file", async () => {
    const path = p("wt-empty.txt");
    assert.equal((await shared().write(path, "")).error, undefined);
    assert.equal((await shared().execute(`test -f '${path}' && test ! -s '${path}' && echo empty`)).output, "empty\n");
  });
  it("should write a file with spaces in the path", async () => {
    await roundTrip(p("wt-spaces/dir with spaces/file name.txt"), "Content in file with spaces");
  });
  it("should write unicode content", async () => {
    await roundTrip(p("wt-unicode.txt"), "Hello 👋 世界 مرحبا Привет 🌍\nLine with émojis 🎉");
  });
  it("should handle consecutive slashes in path", async () => {
    const base = p("wt-slashes");
    await roundTrip(`${base}//subdir///file.txt`, "Content", `${base}/subdir/file.txt`);
  });
  it("should write very long content (1000 lines)", async () => {
    const path = p("wt-long.txt");
    assert.equal((await shared().write(path, rows(1000, (i) => `Line ${i} with some content here`))).error, undefined);
    assert.equal((await shared().execute(`wc -l < '${path}'`)).output.trim(), "999");
  });
  it("should write content with only newlines", async () => {
    const path = p("wt-newlines.txt");
    assert.equal((await shared().write(path, "\n\n\n\n\n")).error, undefined);
    assert.equal((await shared().execute(`wc -l < '${path}'`)).output.trim(), "5");
  });
}

function readCases(shared: Get, p: Resolve): void {
  /** Writes content to a fresh file and reads it back with offset and limit. */
  const readOf = async (name: string, content: string, offset?: number, limit?: number) => {
    const path = p(name);
    await shared().write(path, content);
    return shared().read(path, offset, limit);
  };
  const has = (content: unknown, ...want: string[]) => {
    for (const w of want) assert.ok(String(content ?? "").includes(w), `${JSON.stringify(w)} not in ${String(content).slice(0, 200)}`);
  };
  const lacks = (content: unknown, ...unwanted: string[]) => {
    for (const u of unwanted) assert.ok(!String(content ?? "").includes(u), `${JSON.stringify(u)} in ${String(content).slice(0, 200)}`);
  };
  it("should read a file with line numbers", async () => {
    const r = await readOf("rd-basic.txt", "Line 1\nLine 2\nLine 3");
    assert.equal(r.error, undefined);
    has(r.content, "Line 1", "Line 2", "Line 3");
  });
  it("should return error for nonexistent file", async () => {
    assert.match((await shared().read(p("rd-nonexistent-xyz.txt"))).error ?? "", /not found/i);
  });
  it("should handle reading an empty file", async () => {
    assert.equal((await readOf("rd-empty.txt", "")).error, undefined);
  });
  it("should read with offset parameter", async () => {
    const r = await readOf("rd-offset.txt", rows(10, (i) => `Row_${i + 1}_content`), 5);
    has(r.content, "Row_6_content");
    lacks(r.content, "Row_1_content", "Row_5_content");
  });
  it("should read with limit parameter", async () => {
    const r = await readOf("rd-limit.txt", rows(100, (i) => `Row_${i + 1}_content`), 0, 5);
    has(r.content, "Row_1_content", "Row_5_content");
    lacks(r.content, "Row_6_content");
  });
  it("should read with both offset and limit", async () => {
    const r = await readOf("rd-offset-limit.txt", rows(20, (i) => `Row_${i + 1}_content`), 10, 5);
    has(r.content, "Row_11_content", "Row_15_content");
    lacks(r.content, "Row_10_content", "Row_16_content");
  });
  it("should read unicode content", async () => {
    const r = await readOf("rd-unicode.txt", "Hello 👋 世界\nПривет мир\nمرحبا العالم");
    assert.equal(r.error, undefined);
    has(r.content, "👋", "世界", "Привет", "مرحبا");
  });
  it("should handle files with very long lines", async () => {
    const r = await readOf("rd-long-lines.txt", `Short line\n${"x".repeat(3000)}\nAnother short line`);
    assert.equal(r.error, undefined);
    has(r.content, "Short line");
  });
  it("should return nothing with limit=0", async () => {
    lacks((await readOf("rd-zero-limit.txt", "Line 1\nLine 2\nLine 3", 0, 0)).content, "Line 1");
  });
  it("should handle offset beyond file length", async () => {
    lacks((await readOf("rd-offset-beyond.txt", "Line 1\nLine 2\nLine 3", 100, 10)).content, "Line 1", "Line 2", "Line 3");
  });
  it("should handle offset exactly at file length", async () => {
    lacks((await readOf("rd-offset-exact.txt", rows(5, (i) => `Line ${i + 1}`), 5, 10)).content, "Line 1", "Line 5");
  });
  it("should read a large file in chunks", async () => {
    const path = p("rd-chunked.txt");
    await shared().write(path, rows(1000, (i) => `Line_${String(i).padStart(4, "0")}_content`));
    const chunk = async (offset: number) => (await shared().read(path, offset, 100)).content;
    const first = await chunk(0);
    has(first, "Line_0000_content", "Line_0099_content");
    lacks(first, "Line_0100_content");
    const middle = await chunk(500);
    has(middle, "Line_0500_content", "Line_0599_content");
    lacks(middle, "Line_0499_content", "Line_0600_content");
    has(await chunk(900), "Line_0900_content", "Line_0999_content");
  });
}

function editCases(shared: Get, p: Resolve): void {
  /** Writes before to a fresh file, edits it, and returns the result and the file's bytes after. */
  const editOf = async (name: string, before: string, oldS: string, newS: string, all?: boolean) => {
    const path = p(name);
    await shared().write(path, before);
    const result = await shared().edit(path, oldS, newS, all);
    const [got] = await shared().downloadFiles([path]);
    return { result, after: text(got?.content ?? bytes("")), path };
  };
  const ok = (r: { error?: string | undefined; occurrences?: number | undefined }, n = 1) => {
    assert.equal(r.error, undefined);
    assert.equal(r.occurrences, n);
  };
  it("should edit a single occurrence", async () => {
    const { result, after } = await editOf("ed-single.txt", "Hello world\nGoodbye world\nHello again", "Goodbye", "Farewell");
    ok(result);
    assert.equal(after, "Hello world\nFarewell world\nHello again");
  });
  it("should fail with multiple occurrences without replaceAll", async () => {
    const before = "apple\nbanana\napple\norange\napple";
    const { result, after } = await editOf("ed-multi-fail.txt", before, "apple", "pear", false);
    assert.match(result.error ?? "", /multiple/i);
    assert.equal(after, before, "the file is unchanged");
  });
  it("should replace all occurrences with replaceAll=true", async () => {
    const { result, path } = await editOf("ed-replace-all.txt", "apple\nbanana\napple\norange\napple", "apple", "pear", true);
    ok(result, 3);
    assert.equal(await cat(shared(), path), "pear\nbanana\npear\norange\npear");
  });
  it("should return error when string is not found", async () => {
    const { result, after } = await editOf("ed-not-found.txt", "Hello world", "nonexistent", "replacement");
    assert.match(result.error ?? "", /not found/i);
    assert.equal(after, "Hello world");
  });
  it("should return error for nonexistent file", async () => {
    assert.match((await shared().edit(p("ed-nonexistent-xyz.txt"), "old", "new")).error ?? "", /not found/i);
  });
  it("should handle special characters and regex metacharacters", async () => {
    const path = p("ed-special.txt");
    await shared().write(path, "Price: $100.00\nPattern: [a-z]*\nPath: /usr/bin");
    ok(await shared().edit(path, "$100.00", "$200.00"));
    ok(await shared().edit(path, "[a-z]*", "[0-9]+"));
    assert.equal(await cat(shared(), path), "Price: $200.00\nPattern: [0-9]+\nPath: /usr/bin");
  });
  it("should handle multiline string replacement", async () => {
    const { result, after } = await editOf("ed-multiline.txt", "Line 1\nLine 2\nLine 3", "Line 1\nLine 2", "Combined");
    ok(result);
    assert.equal(after, "Combined\nLine 3");
  });
  it("should delete content by replacing with empty string", async () => {
    const { result, after } = await editOf("ed-delete.txt", "Keep this\nDelete this part\nKeep this too", "Delete this part\n", "");
    ok(result);
    assert.equal(after, "Keep this\nKeep this too");
  });
  it("should handle identical old and new strings", async () => {
    const { result, after } = await editOf("ed-identical.txt", "Same text", "Same text", "Same text");
    ok(result);
    assert.equal(after, "Same text");
  });
  it("should handle unicode content", async () => {
    const { result, after } = await editOf("ed-unicode.txt", "Hello 👋 world\n世界 is beautiful", "👋", "🌍");
    ok(result);
    assert.equal(after, "Hello 🌍 world\n世界 is beautiful");
  });
  it("should handle whitespace-only strings", async () => {
    const { result, after } = await editOf("ed-whitespace.txt", "Line1    Line2", "    ", " ");
    ok(result);
    assert.equal(after, "Line1 Line2");
  });
  it("should handle very long old and new strings", async () => {
    const { result, after } = await editOf("ed-long.txt", `Start\n${"x".repeat(1000)}\nEnd`, "x".repeat(1000), "y".repeat(1000));
    ok(result);
    assert.equal(after, `Start\n${"y".repeat(1000)}\nEnd`);
  });
  it("should preserve line endings correctly", async () => {
    const { result, after } = await editOf("ed-line-endings.txt", "Line 1\nLine 2\nLine 3\n", "Line 2", "Modified Line 2");
    ok(result);
    assert.equal(after, "Line 1\nModified Line 2\nLine 3\n");
  });
  it("should edit a substring within a line", async () => {
    const { result, path } = await editOf("ed-partial.txt", "The quick brown fox jumps over the lazy dog", "brown fox", "red cat");
    ok(result);
    assert.equal(await cat(shared(), path), "The quick red cat jumps over the lazy dog");
  });
}

function lsCases(shared: Get, p: Resolve): void {
  /** The paths ls lists in dir, trailing slashes of folders dropped, sorted. */
  const listed = async (dir: string) => {
    const r = await shared().ls(dir);
    assert.equal(r.error, undefined);
    return (r.files ?? []).map((f) => ({ path: f.path.replace(/\/$/, ""), dir: f.is_dir })).sort((a, b) => a.path.localeCompare(b.path));
  };
  it("should return absolute paths", async () => {
    const dir = p("li-absolute");
    await shared().write(`${dir}/file.txt`, "content");
    assert.deepEqual(await listed(dir), [{ path: `${dir}/file.txt`, dir: false }]);
  });
  it("should list files and subdirectories", async () => {
    const dir = p("li-basic");
    await shared().write(`${dir}/file1.txt`, "content1");
    await shared().write(`${dir}/file2.txt`, "content2");
    await shared().execute(`mkdir -p '${dir}/subdir'`);
    assert.deepEqual(await listed(dir), [
      { path: `${dir}/file1.txt`, dir: false },
      { path: `${dir}/file2.txt`, dir: false },
      { path: `${dir}/subdir`, dir: true },
    ]);
  });
  it("should return empty list for empty directory", async () => {
    const dir = p("li-empty-dir");
    await shared().execute(`mkdir -p '${dir}'`);
    assert.deepEqual(await listed(dir), []);
  });
  it("should return empty list for nonexistent directory", async () => {
    assert.deepEqual(await listed(p("li-does-not-exist-12345")), []);
  });
  it("should include hidden files", async () => {
    const dir = p("li-hidden");
    await shared().write(`${dir}/.hidden`, "hidden content");
    await shared().write(`${dir}/visible.txt`, "visible content");
    assert.deepEqual((await listed(dir)).map((e) => e.path), [`${dir}/.hidden`, `${dir}/visible.txt`]);
  });
  it("should handle directories with spaces in names", async () => {
    const dir = p("li-spaces");
    await shared().write(`${dir}/file with spaces.txt`, "content");
    await shared().execute(`mkdir -p '${dir}/dir with spaces'`);
    assert.deepEqual(await listed(dir), [
      { path: `${dir}/dir with spaces`, dir: true },
      { path: `${dir}/file with spaces.txt`, dir: false },
    ]);
  });
  it("should handle unicode filenames", async () => {
    const dir = p("li-unicode");
    await shared().write(`${dir}/测试文件.txt`, "content");
    await shared().write(`${dir}/файл.txt`, "content");
    assert.deepEqual((await listed(dir)).map((e) => e.path).sort(), [`${dir}/файл.txt`, `${dir}/测试文件.txt`].sort());
  });
  it("should handle large directories", async () => {
    const dir = p("li-large");
    await shared().execute(`mkdir -p '${dir}' && cd '${dir}' && for i in $(seq 0 49); do echo content > file_$(printf '%03d' $i).txt; done`);
    const paths = (await listed(dir)).map((e) => e.path);
    assert.equal(paths.length, 50);
    assert.equal(paths[0], `${dir}/file_000.txt`);
    assert.equal(paths[49], `${dir}/file_049.txt`);
  });
  it("should handle trailing slash in path", async () => {
    const dir = p("li-trailing");
    await shared().write(`${dir}/file.txt`, "content");
    const r = await shared().ls(`${dir}/`);
    assert.equal(r.error, undefined);
    assert.equal(r.files?.length, 1);
    assert.match(r.files?.[0]?.path ?? "", /li-trailing\/+file\.txt$/);
  });
  it("should handle special characters in filenames", async () => {
    const dir = p("li-special-chars");
    await shared().write(`${dir}/file(1).txt`, "content");
    await shared().write(`${dir}/file-3.txt`, "content");
    assert.deepEqual((await listed(dir)).map((e) => e.path).sort(), [`${dir}/file(1).txt`, `${dir}/file-3.txt`].sort());
  });
}

function grepCases(shared: Get, p: Resolve): void {
  /** Writes each file (name → content) under dir, then greps pattern there. */
  const grepIn = async (name: string, files: Record<string, string>, pattern: string, glob?: string) => {
    const dir = p(name);
    for (const [file, content] of Object.entries(files)) await shared().write(`${dir}/${file}`, content);
    const r = await shared().grep(pattern, dir, glob ?? null);
    assert.equal(r.error, undefined);
    return r.matches ?? [];
  };
  it("should find basic literal pattern matches", async () => {
    const m = await grepIn("gr-basic", { "file1.txt": "Hello world\nGoodbye world", "file2.txt": "Hello there\nGoodbye friend" }, "Hello");
    assert.deepEqual(m.map((x) => [x.path.replace(/.*\//, ""), x.line, x.text]).sort(), [
      ["file1.txt", 1, "Hello world"],
      ["file2.txt", 1, "Hello there"],
    ]);
  });
  it("should filter files with glob pattern", async () => {
    const m = await grepIn("gr-glob", { "test.txt": "pattern_match", "test.py": "pattern_match", "test.md": "pattern_match" }, "pattern_match", "*.py");
    assert.deepEqual(m.map((x) => x.path.replace(/.*\//, "")), ["test.py"]);
  });
  it("should return empty matches when no matches found", async () => {
    assert.deepEqual(await grepIn("gr-no-match", { "file.txt": "Hello world" }, "nonexistent_str"), []);
  });
  it("should find multiple matches in a single file", async () => {
    const m = await grepIn("gr-multi", { "fruits.txt": "apple\nbanana\napple\norange\napple" }, "apple");
    assert.deepEqual(m.map((x) => x.line), [1, 3, 5]);
  });
  it("should match literal strings not regex", async () => {
    const m = await grepIn("gr-literal", { "numbers.txt": "test123\ntest456\nabcdef" }, "test123");
    assert.deepEqual(m.map((x) => x.text), ["test123"]);
  });
  it("should find unicode patterns", async () => {
    const m = await grepIn("gr-unicode", { "unicode.txt": "Hello 世界\nПривет мир\n测试 pattern" }, "世界");
    assert.deepEqual(m.map((x) => [x.line, x.text]), [[1, "Hello 世界"]]);
  });
  it("should be case-sensitive by default", async () => {
    const m = await grepIn("gr-case", { "case.txt": "Hello\nhello\nHELLO" }, "Hello");
    assert.deepEqual(m.map((x) => x.text), ["Hello"]);
  });
  it("should handle special characters as literals", async () => {
    const files = { "special.txt": "Price: $100\nPath: /usr/bin\nPattern: [a-z]*" };
    assert.deepEqual((await grepIn("gr-special", files, "$100")).map((x) => x.text), ["Price: $100"]);
    assert.deepEqual((await grepIn("gr-special", files, "[a-z]*")).map((x) => x.text), ["Pattern: [a-z]*"]);
  });
  it("should return empty matches for empty directory", async () => {
    await shared().execute(`mkdir -p '${p("gr-empty-dir")}'`);
    assert.deepEqual(await grepIn("gr-empty-dir", {}, "anything"), []);
  });
  it("should search recursively across nested directories", async () => {
    const files = { "root.txt": "target_nested here", "sub1/level1.txt": "target_nested here", "sub1/sub2/level2.txt": "target_nested here" };
    const m = await grepIn("gr-nested", files, "target_nested");
    assert.deepEqual(m.map((x) => x.path.replace(/.*gr-nested\//, "")).sort(), ["root.txt", "sub1/level1.txt", "sub1/sub2/level2.txt"]);
  });
  it("should report correct line numbers", async () => {
    const m = await grepIn("gr-line-nums", { "long.txt": rows(100, (i) => `Line ${i + 1}`) }, "Line 50");
    assert.deepEqual(m.map((x) => [x.line, x.text]), [[50, "Line 50"]]);
  });
}

function globCases(shared: Get, p: Resolve): void {
  /** Writes each file under dir (and makes the folders), then globs pattern there: the matches' relative paths. */
  const globIn = async (name: string, files: string[], pattern: string, dirs: string[] = []) => {
    const dir = p(name);
    for (const file of files) await shared().write(`${dir}/${file}`, "content");
    if (dirs.length) await shared().execute(`mkdir -p ${dirs.map((d) => `'${dir}/${d}'`).join(" ")}`);
    const r = await shared().glob(pattern, dir);
    assert.equal(r.error, undefined);
    return (r.files ?? []).map((f) => ({ path: f.path, dir: f.is_dir })).sort((a, b) => a.path.localeCompare(b.path));
  };
  const paths = (found: Array<{ path: string }>) => found.map((f) => f.path);
  it("should match basic wildcard pattern", async () => {
    assert.deepEqual(paths(await globIn("gl-basic", ["file1.txt", "file2.txt", "file3.py"], "*.txt")), ["file1.txt", "file2.txt"]);
  });
  it("should match recursive pattern (**)", async () => {
    const found = paths(await globIn("gl-recursive", ["root.txt", "subdir1/nested1.txt", "subdir2/nested2.txt"], "**/*.txt"));
    assert.ok(found.includes("subdir1/nested1.txt") && found.includes("subdir2/nested2.txt"), String(found));
  });
  it("should return empty array when no matches", async () => {
    assert.deepEqual(await globIn("gl-no-match", ["file.txt"], "*.py"), []);
  });
  it("should include directories in results", async () => {
    assert.deepEqual(await globIn("gl-dirs", ["file.txt"], "*", ["dir1", "dir2"]), [
      { path: "dir1", dir: true },
      { path: "dir2", dir: true },
      { path: "file.txt", dir: false },
    ]);
  });
  it("should match specific file extensions", async () => {
    assert.deepEqual(paths(await globIn("gl-ext", ["test.py", "test.txt", "test.md"], "*.py")), ["test.py"]);
  });
  it("should match hidden files explicitly", async () => {
    assert.deepEqual(paths(await globIn("gl-hidden", [".hidden1", ".hidden2", "visible.txt"], ".*")), [".hidden1", ".hidden2"]);
  });
  it("should match character class patterns", async () => {
    const files = ["file1.txt", "file2.txt", "file3.txt", "fileA.txt"];
    assert.deepEqual(paths(await globIn("gl-charclass", files, "file[1-2].txt")), ["file1.txt", "file2.txt"]);
  });
  it("should match single character wildcard (?)", async () => {
    assert.deepEqual(paths(await globIn("gl-question", ["file1.txt", "file2.txt", "file10.txt"], "file?.txt")), ["file1.txt", "file2.txt"]);
  });
  it("should match multiple extensions separately", async () => {
    const files = ["file.txt", "file.py", "file.md", "file.js"];
    assert.deepEqual(paths(await globIn("gl-multi-ext", files, "*.txt")), ["file.txt"]);
    assert.deepEqual(paths(await globIn("gl-multi-ext", [], "*.py")), ["file.py"]);
  });
  it("should match deeply nested patterns", async () => {
    assert.deepEqual(paths(await globIn("gl-deep", ["a/b/c/d/deep.txt", "a/b/other.txt"], "**/deep.txt")), ["a/b/c/d/deep.txt"]);
  });
}

function initialFilesCases(make: Make, p: Resolve): void {
  /** A sandbox made with files, given to check, then closed. */
  const withFiles = async (files: Record<string, string>, check: (sb: TetherSandbox) => Promise<void>) => {
    const sb = await make(files);
    try {
      assert.equal(sb.isRunning, true);
      await check(sb);
    } finally {
      await sb.close();
    }
  };
  it("should create sandbox with initial files", async () => {
    const [plain, nested] = [p("init-test.txt"), p("nested/dir/file.txt")];
    await withFiles({ [plain]: "Hello from initial file!", [nested]: "Nested content" }, async (sb) => {
      assert.deepEqual(await sb.execute(`cat ${plain}`), { output: "Hello from initial file!", exitCode: 0, truncated: false });
      assert.equal(await cat(sb, nested), "Nested content");
    });
  });
  it("should create sandbox with deeply nested initial files", async () => {
    const [button, helper] = [p("src/components/Button/index.tsx"), p("src/utils/helpers/string.ts")];
    const files = { [button]: "export const Button = () => <button>Click</button>;", [helper]: "export const capitalize = (s: string) => s.toUpperCase();" };
    await withFiles(files, async (sb) => {
      assert.equal(await cat(sb, button), files[button]);
      assert.equal(await cat(sb, helper), files[helper]);
    });
  });
  it("should create sandbox with empty initialFiles object", async () => {
    await withFiles({}, async (sb) => {
      assert.deepEqual(await sb.execute('echo "Works!"'), { output: "Works!\n", exitCode: 0, truncated: false });
    });
  });
  it("should make initialFiles accessible via read()", async () => {
    const path = p("init-read-test.txt");
    await withFiles({ [path]: "Content for read test" }, async (sb) => {
      assert.match(String((await sb.read(path)).content), /Content for read test/);
    });
  });
  it("should make initialFiles accessible via downloadFiles()", async () => {
    const path = p("init-download-test.txt");
    await withFiles({ [path]: "Content for download test" }, async (sb) => {
      const [got] = await sb.downloadFiles([path]);
      assert.equal(got?.error, null);
      assert.equal(text(got?.content ?? bytes("")), "Content for download test");
    });
  });
  it("should execute a script created via initialFiles", async () => {
    const path = p("init-script.sh");
    await withFiles({ [path]: '#!/bin/sh\necho "Hello from initialFiles script"' }, async (sb) => {
      assert.deepEqual(await sb.execute(`sh ${path}`), { output: "Hello from initialFiles script\n", exitCode: 0, truncated: false });
    });
  });
  it("should make initialFiles in subdirectories visible via ls()", async () => {
    const dir = p("init-ls-dir");
    await withFiles({ [`${dir}/file.txt`]: "ls test content" }, async (sb) => {
      const r = await sb.ls(dir);
      assert.equal(r.error, undefined);
      assert.deepEqual(r.files?.map((f) => f.path), [`${dir}/file.txt`]);
    });
  });
}

function integrationCases(shared: Get, p: Resolve): void {
  it("should complete a write-read-edit-read workflow", async () => {
    const path = p("intg-workflow.txt");
    assert.equal((await shared().write(path, "Original content")).error, undefined);
    assert.match(String((await shared().read(path)).content), /Original content/);
    assert.equal((await shared().edit(path, "Original", "Modified")).error, undefined);
    const again = String((await shared().read(path)).content);
    assert.match(again, /Modified content/);
    assert.doesNotMatch(again, /Original/);
  });
  it("should handle complex directory operations", async () => {
    const dir = p("intg-complex");
    const files = { "root.txt": "root file", "subdir1/file1.txt": "file 1", "subdir1/file2.py": "file 2", "subdir2/file3.txt": "file 3" };
    for (const [file, content] of Object.entries(files)) await shared().write(`${dir}/${file}`, content);
    const ls = await shared().ls(dir);
    assert.equal(ls.error, undefined);
    assert.deepEqual(ls.files?.map((f) => f.path.replace(/\/$/, "")).sort(), [`${dir}/root.txt`, `${dir}/subdir1`, `${dir}/subdir2`]);
    const glob = await shared().glob("**/*.txt", dir);
    assert.deepEqual(glob.files?.map((f) => f.path).sort(), ["root.txt", "subdir1/file1.txt", "subdir2/file3.txt"]);
    const grep = await shared().grep("file", dir);
    assert.equal(grep.matches?.length, 4);
  });
}
