// The tokenizer on samples of docs/language.md, and its word lists against the Rust sources they
// copy. Run by scripts/build-labextension.sh (`npm test`) before every build.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { StringStream } from '@codemirror/language';

import * as clisp from '../lib/clisp.js';

/** The styled tokens of `text` as `word:style` strings; unstyled tokens and spaces are left out. */
function tokens(text) {
  const state = clisp.cLisp.startState(2);
  const out = [];
  for (const line of text.split('\n')) {
    const stream = new StringStream(line, 4, 2);
    while (!stream.eol()) {
      const style = clisp.cLisp.token(stream, state);
      const piece = stream.current();
      assert.ok(stream.pos > stream.start, `the tokenizer must advance in ${JSON.stringify(line)}`);
      if (style) {
        out.push(`${piece}:${style}`);
      }
      stream.start = stream.pos;
    }
  }
  return out;
}

test('definitions, statements, opcodes and types', () => {
  assert.deepEqual(tokens('(define ((sq int) (x int)) (ret (mul x x)))').filter(t => !t.endsWith(':paren')), [
    'define:definitionKeyword',
    'sq:variableName.definition',
    'int:typeName',
    'int:typeName',
    'ret:controlKeyword',
    'mul:variableName.standard'
  ]);
  assert.deepEqual(tokens('(call sq 7)'), ['(:paren', 'call:keyword', '7:number', '):paren']);
  assert.deepEqual(tokens('(define-struct point (x int))').slice(1, 3), [
    'define-struct:definitionKeyword',
    'point:variableName.definition'
  ]);
  assert.deepEqual(tokens('(declare i (ptr (arr 4 float)))').filter(t => !t.endsWith(':paren')), [
    'declare:definitionKeyword',
    'i:variableName.definition',
    'ptr:typeName',
    'arr:typeName',
    '4:number',
    'float:typeName'
  ]);
  // A variable that shares an opcode's name is coloured only in head position.
  assert.deepEqual(tokens('(set add (add add 1))').filter(t => !t.endsWith(':paren')), [
    'set:keyword',
    'add:variableName.standard',
    '1:number'
  ]);
  assert.deepEqual(tokens('(define-kernel ((k void) (a (ptr float) in n) (h (ptr int8) handle)))').filter(
    t => t.endsWith(':keyword')
  ), ['in:keyword', 'handle:keyword']);
  assert.deepEqual(tokens('(launch k (grid 1) (block 256) a)').filter(t => t.endsWith(':keyword')), [
    'launch:keyword',
    'grid:keyword',
    'block:keyword'
  ]);
});

test('comments', () => {
  assert.deepEqual(tokens('(add 1 2) ; a comment'), [
    '(:paren',
    'add:variableName.standard',
    '1:number',
    '2:number',
    '):paren',
    '; a comment:lineComment'
  ]);
  assert.deepEqual(tokens('#| a #| nests |# still |# (add 3 4)').slice(0, 3), [
    '#| a #| nests |# still |#:blockComment',
    '(:paren',
    'add:variableName.standard'
  ]);
  assert.deepEqual(tokens('#| one\ntwo |# x'), ['#| one:blockComment', 'two |#:blockComment']);
  const datum = tokens('#;(add (mul 5 5)\n 5) (sub 6 7)');
  assert.ok(datum.slice(0, 10).every(t => t.endsWith(':comment')), datum.join(' '));
  assert.deepEqual(datum.slice(10, 12), ['(:paren', 'sub:variableName.standard']);
  assert.deepEqual(tokens('#;x 1'), ['#;:comment', 'x:comment', '1:number']);
});

test('strings, escapes and Rhai code', () => {
  assert.deepEqual(tokens('"tab:\\t q:\\" cp:\\x3bb; end"'), [
    '"tab::string',
    '\\t:escape',
    ' q::string',
    '\\":escape',
    ' cp::string',
    '\\x3bb;:escape',
    ' end":string'
  ]);
  assert.deepEqual(tokens('"one \\\n  two" 1'), ['"one :string', '\\:escape', '  two":string', '1:number']);
  assert.deepEqual(tokens('(rhai "let x = 1;\nlet s = \\"a\\";")').slice(1), [
    'rhai:keyword',
    '"let x = 1;:string.special',
    'let s = :string.special',
    '\\":escape',
    'a:string.special',
    '\\":escape',
    ';":string.special',
    '):paren'
  ]);
  assert.deepEqual(tokens('(rhai-file "macros.rhai")').slice(2, 3), ['"macros.rhai":string']);
});

test('numbers and other atoms', () => {
  for (const number of ['42', '-7', '0x10', '-0x10', '#xff', '#b101', '#o17', '1.5e3', '.5', '2.', '1e20', '+inf.0', '-inf.0', '+nan.0']) {
    assert.deepEqual(tokens(number), [`${number}:number`]);
  }
  for (const symbol of ['12-idx', '-', 'tid', '...', 'inf.0']) {
    assert.deepEqual(tokens(symbol), [], symbol);
  }
  // Words that name properties of every JavaScript object are plain words too.
  assert.deepEqual(tokens('(toString (constructor (run 1)))').filter(t => !t.endsWith(':paren')), ['1:number']);
  assert.deepEqual(tokens('#t #false #:bias #\\a'), ['#t:bool', '#false:bool', '#:bias:atom', '#\\a:invalid']);
});

test('commands, quasiquote and unquote', () => {
  assert.deepEqual(tokens(':ir opt sq'), [':ir:meta']);
  assert.deepEqual(tokens('  :expand (add 1 2)').slice(0, 1), [':expand:meta']);
  assert.deepEqual(tokens('(:ir)'), ['(:paren', '):paren']);
  assert.deepEqual(tokens('(add ,width 1)').slice(2, 4), [',:operator', 'width:variableName.special']);
  assert.deepEqual(tokens(',@(unroll 4 k `(store (ptradd a ,k) 0))').filter(t => !t.endsWith(':paren')), [
    ',@:operator',
    'unroll:variableName.special',
    '4:number',
    '`:operator',
    'store:variableName.standard',
    'ptradd:variableName.standard',
    ',:operator',
    'k:variableName.special',
    '0:number'
  ]);
  assert.deepEqual(tokens('(autotune v (gen g f) (params (f 1 4)) (run (call v)))').filter(t => t.endsWith(':keyword')), [
    'autotune:keyword',
    'gen:keyword',
    'params:keyword',
    'run:keyword',
    'call:keyword'
  ]);
});

/** The string literals between `start` and the next `];` of a Rust source. */
function rustList(path, start) {
  const source = readFileSync(new URL(path, import.meta.url), 'utf8');
  const from = source.indexOf(start);
  assert.ok(from >= 0, `${start} in ${path}`);
  const body = source.slice(from, source.indexOf('];', from));
  return [...body.matchAll(/\("(:[a-z-]+)|^\s*"([^"]+)",/gm)].map(m => m[1] ?? m[2]);
}

test('every form of FORM_NAMES and every command of COMMANDS is known', () => {
  const known = new Set([
    ...clisp.DEFINITION_FORMS,
    ...clisp.CONTROL_FORMS,
    ...clisp.OTHER_FORMS,
    ...clisp.OPCODES,
    ...clisp.TYPES,
    ...[...clisp.CLAUSES.values()].flat(),
    ...clisp.ANNOTATIONS
  ]);
  const forms = rustList('../../../lang/src/check/mod.rs', 'pub(crate) const FORM_NAMES');
  assert.ok(forms.length > 100);
  assert.deepEqual(forms.filter(form => !known.has(form)), []);
  const commands = rustList('../../../lang/src/command.rs', 'pub(crate) const COMMANDS').map(c => c.slice(1));
  assert.deepEqual([...commands].sort(), [...clisp.COMMANDS].sort());
});
