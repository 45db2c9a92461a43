// An AssemblyScript DoFn for ksrunner's WASM ABI v1 (see package wasmabi):
// "Split" splits UTF-8 strings (Beam string_utf8, nested: a varint length and
// the bytes) into words, the maximal runs of bytes other than ASCII space,
// tab, newline and carriage return, exactly like the Go example's
// wordfns.Split. It counts the words in the counter words/words.
//
// The module implements the ABI directly, without an SDK: it runs stages of
// one transform whose DoFn is "Split", with at most one output. Memory is
// managed by hand with the stub runtime (nothing is ever freed; the input
// and output buffers grow by doubling and are reused).

@external("ksr", "counter")
declare function hostCounter(transform: i32, ns: usize, nsLen: i32, name: usize, nameLen: i32, delta: i64): void;

const STATUS_OK: i32 = 0;
const STATUS_ERROR: i32 = 1;
const DESC_SIZE: i32 = 24;
const DESC_ELEMENT: i32 = 16;
const DESC_END: i32 = 20;
const RECORD_HEADER: i32 = 12;

// result block: out_ptr, out_len, err_ptr, err_len
const result: usize = heap.alloc(16);

let inPtr: usize = 0;
let inCap: i32 = 0;
let outPtr: usize = 0;
let outCap: i32 = 0;
let outLen: i32 = 0;
let msgPtr: usize = 0;
let msgLen: i32 = 0;

let outputIndex: i32 = -1; // the transform's output in the stage outputs, or -1 (dropped)
let words: i64 = 0;
let nsBuf: ArrayBuffer = String.UTF8.encode("words");
let nameBuf: ArrayBuffer = String.UTF8.encode("words");

function clearResult(): void {
  store<u32>(result, 0, 0);
  store<u32>(result, 0, 4);
  store<u32>(result, 0, 8);
  store<u32>(result, 0, 12);
}

function fail(msg: string): i32 {
  const b = String.UTF8.encode(msg);
  msgPtr = changetype<usize>(b);
  msgLen = b.byteLength;
  clearResult();
  store<u32>(result, <u32>msgPtr, 8);
  store<u32>(result, <u32>msgLen, 12);
  return STATUS_ERROR;
}

export function ksr_abi_version(): i32 {
  return 1;
}

export function ksr_result(): usize {
  return result;
}

export function ksr_reserve(size: i32): usize {
  if (size > inCap) {
    inPtr = heap.alloc(<usize>size);
    inCap = size;
  }
  return inPtr;
}

// ---- stage description ----------------------------------------------------

let rd: usize = 0;
let rdEnd: usize = 0;
let rdBad = false;

function readU32(): u32 {
  if (rd + 4 > rdEnd) {
    rdBad = true;
    return 0;
  }
  const v = load<u32>(rd);
  rd += 4;
  return v;
}

function readStr(): string {
  const n = readU32();
  if (rdBad || rd + n > rdEnd) {
    rdBad = true;
    return "";
  }
  const s = String.UTF8.decodeUnsafe(rd, n);
  rd += n;
  return s;
}

export function ksr_setup(len: i32): i32 {
  rd = inPtr;
  rdEnd = inPtr + <usize>len;
  readStr(); // stage id
  readStr(); // input PCollection
  const outputs = new Array<string>();
  for (let n = readU32(); n > 0 && !rdBad; n--) outputs.push(readStr());
  const transforms = readU32();
  if (rdBad) return fail("malformed stage description");
  if (transforms != 1) return fail("this module runs stages of one transform, got " + transforms.toString());
  const id = readStr();
  const dofn = readStr();
  readStr(); // input
  const nOut = readU32();
  if (rdBad) return fail("malformed stage description");
  if (dofn != "Split") return fail("transform " + id + ": no DoFn registered as \"" + dofn + "\" (registered: [Split])");
  if (nOut > 1) return fail("transform " + id + ": DoFn Split has one output, the transform " + nOut.toString());
  outputIndex = -1;
  if (nOut == 1) {
    readStr(); // tag
    const pc = readStr();
    outputIndex = outputs.indexOf(pc);
  }
  clearResult();
  return STATUS_OK;
}

export function ksr_start_bundle(): i32 {
  words = 0;
  clearResult();
  return STATUS_OK;
}

// ---- processing -------------------------------------------------------------

@inline
function ensureOut(n: i32): void {
  if (outLen + n > outCap) {
    let c = outCap < 65536 ? 65536 : outCap * 2;
    while (outLen + n > c) c *= 2;
    const p = heap.alloc(<usize>c);
    memory.copy(p, outPtr, <usize>outLen);
    outPtr = p;
    outCap = c;
  }
}

@inline
function emitWord(src: i32, start: usize, n: i32): void {
  words++;
  if (outputIndex < 0) return;
  ensureOut(RECORD_HEADER + 5 + n);
  let o = outPtr + <usize>outLen;
  store<u32>(o, <u32>outputIndex);
  store<u32>(o, <u32>src, 4);
  o += RECORD_HEADER;
  // the element: varint length, bytes
  let v = <u32>n;
  let hdr = 1;
  while (v >= 0x80) {
    store<u8>(o, <u8>(v | 0x80));
    o++;
    v >>= 7;
    hdr++;
  }
  store<u8>(o, <u8>v);
  o++;
  memory.copy(o, start, <usize>n);
  store<u32>(outPtr + <usize>outLen, <u32>(hdr + n), 8);
  outLen += RECORD_HEADER + hdr + n;
}

@inline
function isSeparator(c: u32): bool {
  return c == 0x20 || c == 0x09 || c == 0x0a || c == 0x0d;
}

export function ksr_process(n: i32, desc: i32): i32 {
  outLen = 0;
  for (let i = 0; i < n; i++) {
    const d = inPtr + <usize>desc + <usize>(i * DESC_SIZE);
    let p = inPtr + <usize>load<u32>(d, DESC_ELEMENT);
    const end = inPtr + <usize>load<u32>(d, DESC_END);
    // string_utf8, nested: varint length, bytes
    let len: u32 = 0;
    let shift: u32 = 0;
    while (true) {
      if (p >= end) return fail("element " + i.toString() + ": truncated string length");
      const b = <u32>load<u8>(p);
      p++;
      len |= (b & 0x7f) << shift;
      if (b < 0x80) break;
      shift += 7;
    }
    if (p + <usize>len != end) return fail("element " + i.toString() + ": string of " + len.toString() + " bytes does not fill the element");
    let start: isize = -1;
    for (let q = p; q < end; q++) {
      if (isSeparator(<u32>load<u8>(q))) {
        if (start >= 0) {
          emitWord(i, <usize>start, <i32>(q - <usize>start));
          start = -1;
        }
      } else if (start < 0) {
        start = <isize>q;
      }
    }
    if (start >= 0) emitWord(i, <usize>start, <i32>(end - <usize>start));
  }
  clearResult();
  store<u32>(result, <u32>outPtr, 0);
  store<u32>(result, <u32>outLen, 4);
  return STATUS_OK;
}

export function ksr_finish_bundle(): i32 {
  if (words > 0) {
    hostCounter(0, changetype<usize>(nsBuf), nsBuf.byteLength, changetype<usize>(nameBuf), nameBuf.byteLength, words);
  }
  words = 0;
  clearResult();
  return STATUS_OK;
}

export function ksr_teardown(): i32 {
  clearResult();
  return STATUS_OK;
}
