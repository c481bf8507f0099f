// The parity test's reference side: encodes and decodes the corpus with the
// JavaScript implementation of Hugging Face tokenizers (@huggingface/tokenizers)
// and writes the same JSON as `hf_tokenizer_tool parity`.
//
//   node parity_reference.mjs NPM_DIR TOKENIZER_JSON TOKENIZER_CONFIG CORPUS OUT
//
// NPM_DIR is the directory whose node_modules holds the package.
import { createRequire } from "node:module";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const [npmDir, tokenizerPath, configPath, corpusPath, outPath] =
  process.argv.slice(2);
const require = createRequire(join(npmDir, "package.json"));
const { Tokenizer } = require("@huggingface/tokenizers");

const tokenizer = new Tokenizer(
  JSON.parse(readFileSync(tokenizerPath, "utf8")),
  JSON.parse(readFileSync(configPath, "utf8")),
);

let corpus = readFileSync(corpusPath, "utf8");
if (corpus.endsWith("\n")) corpus = corpus.slice(0, -1);
const cases = corpus.split("\n%%%\n");
cases.push(corpus);

const out = cases.map((text) => {
  const ids = tokenizer.encode(text, { add_special_tokens: false }).ids;
  // decode refuses an empty list.
  const decode = (skip) =>
    ids.length === 0 ? "" : tokenizer.decode(ids, { skip_special_tokens: skip });
  return { text, ids, decoded: decode(false), decoded_skip: decode(true) };
});
writeFileSync(outPath, JSON.stringify(out, null, 1) + "\n");
console.error(`parity_reference: ${out.length} cases`);
