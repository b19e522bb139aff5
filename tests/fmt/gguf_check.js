// Reads a GGUF export with npm's @huggingface/gguf parser and checks every
// metadata key and value, every tensor's name, shape, dtype and offset
// against what gptd's writer promises (engine/fmt/gguf.h) for the model
// described by EXPECT. With VOCAB_DIR, the tokenizer metadata must be
// exactly that folder's encoder.json (by id) and vocab.bpe (by rank).
// Writes the parsed tensor table to OUT (JSON) for the data checks.
// usage: node gguf_check.js NPM_DIR FILE EXPECT_JSON OUT_JSON [VOCAB_DIR]
"use strict";
const fs = require("fs");
const [npm, file, expectJson, outJson, vocab] = process.argv.slice(2);
const { gguf } = require(npm + "/node_modules/@huggingface/gguf");
const want = JSON.parse(expectJson);

function fail(msg) {
  console.error(`FAIL: ${file}: ${msg}`);
  process.exit(1);
}
function eq(what, got, exp) {
  if (got !== exp) fail(`${what} is ${JSON.stringify(String(got))}, expected ${JSON.stringify(String(exp))}`);
}

(async () => {
  const { metadata: md, tensorInfos, tensorDataOffset } = await gguf(file, { allowLocalFile: true });
  const { L, NH, C, T, V, dtype } = want;
  const ggmlType = { f32: 0, f16: 1, bf16: 30 }[dtype];
  const ftype = { f32: 0, f16: 1, bf16: 32 }[dtype];
  const keys = {
    "general.architecture": "gpt2",
    "general.name": want.name,
    "general.file_type": ftype,
    "general.alignment": 32,
    "gpt2.context_length": T,
    "gpt2.embedding_length": C,
    "gpt2.feed_forward_length": 4 * C,
    "gpt2.block_count": L,
    "gpt2.attention.head_count": NH,
    "gpt2.attention.layer_norm_epsilon": Math.fround(1e-5),
  };
  if (vocab) {
    Object.assign(keys, {
      "tokenizer.ggml.model": "gpt2",
      "tokenizer.ggml.pre": "gpt-2",
      "tokenizer.ggml.bos_token_id": 50256,
      "tokenizer.ggml.eos_token_id": 50256,
    });
  }
  const tokKeys = vocab ? ["tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges"] : [];
  eq("version", md.version, 3);
  const present = Object.keys(md).filter((k) => !["version", "tensor_count", "kv_count"].includes(k));
  const expected = Object.keys(keys).concat(tokKeys);
  eq("kv_count", Number(md.kv_count), expected.length);
  for (const k of present) if (!expected.includes(k)) fail(`unexpected key ${k}`);
  for (const k of expected) if (!(k in md)) fail(`missing key ${k}`);
  for (const [k, v] of Object.entries(keys)) eq(k, md[k], v);

  if (vocab) {
    const enc = JSON.parse(fs.readFileSync(vocab + "/encoder.json", "utf8"));
    const byId = [];
    for (const [s, id] of Object.entries(enc)) byId[id] = s;
    const toks = md["tokenizer.ggml.tokens"];
    eq("tokenizer.ggml.tokens length", toks.length, byId.length);
    eq("vocabulary size", byId.length, V);
    for (let i = 0; i < byId.length; i++) if (toks[i] !== byId[i]) eq(`token ${i}`, toks[i], byId[i]);
    const types = md["tokenizer.ggml.token_type"];
    eq("token_type length", types.length, V);
    for (let i = 0; i < V; i++) eq(`token_type[${i}]`, types[i], byId[i] === "<|endoftext|>" ? 3 : 1);
    const merges = fs.readFileSync(vocab + "/vocab.bpe", "utf8").split("\n")
      .filter((l, i) => l.length > 0 && !(i === 0 && l.startsWith("#version")));
    const got = md["tokenizer.ggml.merges"];
    eq("merges length", got.length, merges.length);
    for (let i = 0; i < merges.length; i++) if (got[i] !== merges[i]) eq(`merge ${i}`, got[i], merges[i]);
  }

  // tensors: names, order, shapes (innermost first), dtypes, aligned offsets
  const exp = [["token_embd.weight", [C, V]], ["position_embd.weight", [C, T]]];
  for (let l = 0; l < L; l++) {
    const b = `blk.${l}.`;
    exp.push([b + "attn_norm.weight", [C]], [b + "attn_norm.bias", [C]],
      [b + "attn_qkv.weight", [C, 3 * C]], [b + "attn_qkv.bias", [3 * C]],
      [b + "attn_output.weight", [C, C]], [b + "attn_output.bias", [C]],
      [b + "ffn_norm.weight", [C]], [b + "ffn_norm.bias", [C]],
      [b + "ffn_up.weight", [C, 4 * C]], [b + "ffn_up.bias", [4 * C]],
      [b + "ffn_down.weight", [4 * C, C]], [b + "ffn_down.bias", [C]]);
  }
  exp.push(["output_norm.weight", [C]], ["output_norm.bias", [C]], ["output.weight", [C, V]]);
  eq("tensor_count", Number(md.tensor_count), exp.length);
  eq("tensors parsed", tensorInfos.length, exp.length);
  let end = 0n;
  const out = [];
  tensorInfos.forEach((t, i) => {
    const [name, shape] = exp[i];
    eq(`tensor ${i} name`, t.name, name);
    eq(`${name} shape`, t.shape.map(Number).join(","), shape.join(","));
    eq(`${name} n_dims`, t.n_dims, shape.length);
    eq(`${name} dtype`, t.dtype, shape.length === 2 ? ggmlType : 0);
    if (t.offset % 32n !== 0n) fail(`${name} offset ${t.offset} is not 32-aligned`);
    if (t.offset < end) fail(`${name} overlaps the tensor before it`);
    const count = shape.reduce((a, b) => a * b, 1);
    end = t.offset + BigInt(count * (t.dtype === 0 ? 4 : 2));
    out.push({ name, dtype: t.dtype, count, offset: Number(t.offset) });
  });
  if (Number(tensorDataOffset) % 32 !== 0) fail(`data section at ${tensorDataOffset} is not 32-aligned`);
  const size = fs.statSync(file).size;
  eq("file size", size, Number(tensorDataOffset + end + ((32n - (end % 32n)) % 32n)));
  fs.writeFileSync(outJson, JSON.stringify({ data: Number(tensorDataOffset), tensors: out }));
  console.log(`${file}: ${expected.length} keys, ${exp.length} tensors (${dtype}) ok`);
})().catch((e) => fail(e.stack || e));
