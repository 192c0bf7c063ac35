// tsc's command line, many times in one Node process (tests/clients/test_typescript_client.py).
//
// Each line of stdin is one compile, {"cwd": DIR, "args": [tsc's arguments]}; each answer is
// one line of stdout, {"status": N, "output": TEXT}: tsc's exit status (0, or 1 when it emitted
// nothing, 2 when it emitted despite errors) and its diagnostics as tsc prints them to a pipe
// (`file(line,col): error TSnnnn: message`). A fresh tsc process loads the compiler and parses
// the libs (lib.dom.d.ts, @types/node) again on every run, most of a run's CPU with
// --skipLibCheck; here the compiler is loaded once and a lib file, the same bytes on every
// run, is parsed once. Every file of the compile itself is read afresh each time.
"use strict";

const path = require("node:path");
const readline = require("node:readline");
const ts = require("typescript");

const SHARED = [path.dirname(ts.getDefaultLibFilePath({})), path.join(__dirname, "node_modules")];
const parsed = new Map(); // a shared file's name and language version -> its SourceFile

function shared(fileName) {
  return SHARED.some((dir) => fileName.startsWith(dir + path.sep));
}

function compile(cwd, args) {
  // tsc resolves its arguments against the directory it runs in; ts.sys keeps the first
  // process.cwd() it saw, so the host is told instead.
  process.chdir(cwd);
  const line = ts.parseCommandLine(args);
  const host = ts.createCompilerHost(line.options);
  host.getCurrentDirectory = () => cwd;
  const read = host.getSourceFile;
  host.getSourceFile = (fileName, version, onError, fresh) => {
    if (!shared(fileName)) return read(fileName, version, onError, fresh);
    const key = `${fileName}\0${JSON.stringify(version)}`;
    if (!parsed.has(key)) parsed.set(key, read(fileName, version, onError, fresh));
    return parsed.get(key);
  };
  let diagnostics = [...line.errors];
  let emitted = false;
  if (diagnostics.length === 0) {
    const program = ts.createProgram(line.fileNames, line.options, host);
    diagnostics = [...ts.getPreEmitDiagnostics(program)];
    const emit = program.emit();
    diagnostics.push(...emit.diagnostics);
    emitted = !emit.emitSkipped && !line.options.noEmit;
  }
  const output = ts.formatDiagnostics(diagnostics, {
    getCanonicalFileName: (name) => name,
    getCurrentDirectory: () => cwd,
    getNewLine: () => "\n",
  });
  return { status: diagnostics.length === 0 ? 0 : emitted ? 2 : 1, output };
}

readline.createInterface({ input: process.stdin }).on("line", (text) => {
  const request = JSON.parse(text);
  let answer;
  try {
    answer = compile(request.cwd, request.args);
  } catch (error) {
    answer = { status: 3, output: String(error && error.stack) };
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
});
