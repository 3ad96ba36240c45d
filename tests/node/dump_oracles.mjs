// Dumps the reference tokenizers' data and their own encode() of a corpus to
// JSON, for prefixd's tokenizer oracle tests (tests/test_tokenizer_spm.cpp,
// tests/test_tokenizer_bpe.cpp). Usage: node dump_oracles.mjs OUT_DIR
// Writes OUT_DIR/llama2.json (llama-tokenizer-js) and OUT_DIR/llama3.json
// (llama3-tokenizer-js). Corpus strings are stored as hex of their UTF-8 bytes;
// ill-formed byte strings are given to the packages as TextDecoder decodes them
// (U+FFFD per maximal subpart), the rule prefixd's tokenizers apply too.
import fs from 'node:fs';
import path from 'node:path';
import llamaTokenizer from 'llama-tokenizer-js';
import llama3Tokenizer from 'llama3-tokenizer-js';

const outDir = process.argv[2];
if (!outDir) {
  console.error('usage: node dump_oracles.mjs OUT_DIR');
  process.exit(2);
}
fs.mkdirSync(outDir, { recursive: true });

// ---- Corpus -------------------------------------------------------------
const texts = [
  'Hello world', 'Hello, world!', 'The quick brown fox jumps over the lazy dog.',
  'Once upon a time, there was a little girl named Lily.',
  'grabbed', ' grabbed', '           grabbed', '\n', ' \n', '\ttabs\t\t\t\tout here',
  'ax\n####\nboo', '镇', '🦙', '🦙Ꙋ', 'Ꙋ🦙', 'This is a test sentence.',
  "don't", "I'm", "you're", "we've", "she'll", "he'd", "it's", "DON'T", "I'M", "You'RE", "they'LL",
  "'s", "'t", "rock'n'roll", "O'Neil's dog's toy",
  'café', 'naïve', 'résumé', 'über', 'Ångström', 'façade', 'crème brûlée', 'smörgåsbord', 'Ñandú',
  'Straße', 'ĳssel', 'Œuvre', 'Ελληνικά κείμενα', 'Русский текст здесь', 'עברית', 'العربية',
  'हिन्दी', 'ภาษาไทย', '日本語のテキスト', '中文文本，包括标点。', '한국어 텍스트', 'ｆｕｌｌｗｉｄｔｈ',
  '😀', '😀😀😀', 'emoji 🙂🚀 end', '👨‍👩‍👧‍👦 family', '🇫🇷🇩🇪 flags', 'thumbs 👍🏽 up', '❤️', '✔ done',
  '1', '12', '123', '1234', '12345', '123456', '1234567', '12345678901234567890', '3.14159',
  '1,000,000', '$1,234.56', '50%', '-42', '+7', '1e10', '0x1F', '2024-01-15', '12:34:56', 'v1.2.3',
  '٣٤٥ Arabic digits', '१२३ Devanagari digits', '½ ¾ ²', 'Ⅻ roman',
  '', ' ', '  ', '   ', '    ', '\t', '\n\n', '\r\n', '\r\n\r\n', ' \t \n ', 'a  b', 'a   b', 'a\u00a0b',
  'trailing space ', 'trailing spaces   ', '   leading', '\n\nleading newlines', 'x\n\n\ny',
  'line1\nline2\nline3', 'tab\there', 'a\tb\tc', 'mixed \t\n whitespace',
  '!!!', '???', '...', '…', '—', '–', '«quoted»', '“smart quotes”', '‘single’', '"quoted"',
  '(paren) [bracket] {brace}', '<tag attr="v">text</tag>', 'a+b=c', 'x^2 + y^2 = z^2', '~/path/to/file.txt',
  'user@example.com', 'https://example.com/a?b=c&d=e#f', '#hashtag @mention', '50/50', 'and/or',
  '#include <stdio.h>\nint main(void) {\n    printf("hi\\n");\n    return 0;\n}\n',
  'def f(x):\n    return x * 2\n', 'for (let i = 0; i < n; i++) { sum += a[i]; }',
  'SELECT * FROM users WHERE id = 42;', '{"key": "value", "n": [1, 2, 3]}', '    indented code',
  '\tif (a && b || !c) { x->y = z; }', 'fn main() -> Result<(), Error> { Ok(()) }', '$ ls -la | grep foo',
  '// comment\n/* block */', '```python\nprint("x")\n```', 'camelCaseIdentifier snake_case_name CONSTANT_NAME',
  'UPPER lower MiXeD', 'ALLCAPS SENTENCE HERE', 'a', 'I', 'x', 'Z', 'aaaaaaaaaaaaaaaaaaaaaaaa',
  'abababababab', 'the the the the', 'Lily\'s mom said, "Be careful!"', 'a\u0000b', '\u0001\u0002\u0003',
  'bell\u0007char', 'e\u0301 combining', 'ﬁ ligature', 'Ωmega', '∑ ∫ √ ∞ ≠ ≤', '→ ← ↑ ↓', '© ® ™',
  '€100 £50 ¥1000', 'Zürich, München, Köln', 'Ça va? Oui!', '¿Qué tal? ¡Bien!',
  'Mr. Smith went to Washington D.C. in 1999.', 'e.g., i.e., etc.', 'The year 2023 had 365 days.',
  'A sentence with a number 42 in it and another 1337.', 'Supercalifragilisticexpialidocious',
  'pneumonoultramicroscopicsilicovolcanoconiosis', 'Antidisestablishmentarianism!',
];
// Generated families: whitespace runs, digit runs, punctuation runs, mixes.
for (let k = 1; k <= 12; k++) texts.push(' '.repeat(k) + 'word');
for (let k = 1; k <= 6; k++) texts.push('word' + '\n'.repeat(k) + 'next');
for (let k = 1; k <= 25; k += 3) texts.push('7'.repeat(k));
for (let k = 1; k <= 8; k++) texts.push('digits' + '0123456789'.slice(0, k) + 'x');
for (const p of ['!', '?', '.', ',', '-', '_', '=', '*', '#', '/']) texts.push('word' + p.repeat(3) + ' next');
const words = ['hello', 'World', 'naïve', '東京', '42', "can't", '🙂', 'foo_bar', 'x86-64', 'C++'];
for (let i = 0; i < words.length; i++) {
  for (let j = 0; j < words.length; j += 3) {
    texts.push(words[i] + ' ' + words[j] + (i % 2 ? '\n' : '.'));
  }
}
const sentences = [
  'It was the best of times, it was the worst of times.',
  'Call me Ishmael. Some years ago—never mind how long precisely—having little or no money in my purse',
  'In a hole in the ground there lived a hobbit.',
];
for (const s of sentences) { texts.push(s); texts.push(s.toUpperCase()); texts.push(s.replaceAll(' ', '  ')); }

// Strings that contain Llama 3 special-token text (compared with parse_special).
const special3 = [
  '<|begin_of_text|>Hello', '<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>',
  'text <|eot_id|> more text', '<|reserved_special_token_0|>',
];

// Ill-formed UTF-8 byte strings.
const invalidHex = [
  '61ff62', '61fe62', 'c0af', 'e282', '61e28262', 'f09f98', '61f09f9862', 'eda080', '80', '8081828384',
  'f4908080', 'c3', 'e0808061', 'ff', '68656c6c6fc328776f726c64', 'f8888080', '2020ff2020', '61c3a9ff',
];

const enc = new TextEncoder();
const dec = new TextDecoder('utf-8');
const toHex = (bytes) => Buffer.from(bytes).toString('hex');

const cases = [];  // {hex, text (string given to JS), special}
for (const t of texts) cases.push({ hex: toHex(enc.encode(t)), text: t, special: false });
for (const t of special3) cases.push({ hex: toHex(enc.encode(t)), text: t, special: true });
for (const h of invalidHex) cases.push({ hex: h, text: dec.decode(Buffer.from(h, 'hex')), special: false });

// ---- Llama 2 (SPM) --------------------------------------------------------
{
  const t = llamaTokenizer;
  const n = t.vocabById.length;
  // Scores: the package ranks merges (all splits of every piece, ordered by the
  // piece's SentencePiece score); a piece's score is minus the rank of the first
  // merge that forms it, so higher score = earlier merge, as llama.cpp expects.
  const scores = new Array(n).fill(0);
  const seen = new Set();
  for (const [key, rank] of t.merges) {
    const id = t.vocabByString.get(key.replace(' ', ''));
    if (id !== undefined && !seen.has(id)) { seen.add(id); scores[id] = -rank; }
  }
  const types = t.vocabById.map((_, id) => id === 0 ? 2 : id <= 2 ? 3 : id <= 258 ? 6 : 1);
  const out = [];
  for (const c of cases) {
    if (c.special || c.text.length === 0) continue;  // the package never parses specials; "" -> []
    out.push({ hex: c.hex, ids: t.encode(c.text) });  // BOS + leading space, as its defaults
  }
  fs.writeFileSync(path.join(outDir, 'llama2.json'),
    JSON.stringify({ tokens: t.vocabById, scores, token_types: types, cases: out }));
  console.log(`llama2.json: ${n} tokens, ${out.length} cases`);
}

// ---- Llama 3 (byte-level BPE) ----------------------------------------------
{
  const t = llama3Tokenizer;
  const n = t.vocabById.length;
  const merges = [...t.merges.entries()].sort((a, b) => a[1] - b[1]).map(([k]) => k);
  const types = t.vocabById.map((_, id) => id >= 128000 ? 3 : 1);
  const out = [];
  for (const c of cases) {
    out.push({ hex: c.hex, parse_special: c.special, ids: t.encode(c.text, { bos: true, eos: false }) });
  }
  fs.writeFileSync(path.join(outDir, 'llama3.json'),
    JSON.stringify({ tokens: t.vocabById, merges, token_types: types, bos: 128000, eos: 128001,
                     cases: out }));
  console.log(`llama3.json: ${n} tokens, ${merges.length} merges, ${out.length} cases`);
}
