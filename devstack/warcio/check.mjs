// The interop check of Trawl's archives (make interop): every WARC file named on the
// command line is read with warcio.js — Webrecorder's reader, the one ReplayWeb.page and
// pywb's tooling share, and no code of Trawl's writer — and must hold:
//   - every record parses;
//   - every response record's WARC-Payload-Digest is the sha1 (base32) of the payload
//     warcio reads, and every other record's WARC-Block-Digest that of its block;
//   - every line of the .cdxj beside a file names a record warcio's own indexer finds at
//     the same offset, with the same length (and digest, when both give one);
//   - a rendered page's DOM is a resource record of urn:dom:<URL>, typed text/html, whose
//     WARC-Payload-Digest is its block's, and every WARC-Concurrent-To of a record names a
//     record of the same file (a browser's exchange names its request or response and its
//     page's DOM).
// Exits 1 and prints each problem otherwise.
import fs from "node:fs";
import crypto from "node:crypto";
import { WARCParser, CDXIndexer } from "warcio";

const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
function base32(buf) {
  let bits = 0, value = 0, out = "";
  for (const byte of buf) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += alphabet[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += alphabet[(value << (5 - bits)) & 31];
  return out;
}
const sha1 = (b) => "sha1:" + base32(crypto.createHash("sha1").update(b).digest());

let records = 0, responses = 0, doms = 0, indexed = 0, problems = 0;
const problem = (msg) => { problems++; console.log(msg); };

for (const file of process.argv.slice(2)) {
  const parser = new WARCParser(fs.createReadStream(file), { keepHeadersCase: true });
  const ids = new Set(), links = [];
  for await (const rec of parser) {
    records++;
    ids.add(rec.warcHeader("WARC-Record-ID"));
    const conc = rec.warcHeader("WARC-Concurrent-To");
    // warcio joins a repeated field with ",,,".
    if (conc) for (const id of conc.split(/\s*,+\s*/)) links.push([rec.warcTargetURI, id]);
    // For a request or response, readFully(false) gives the HTTP payload as stored (the
    // content coding kept); for other records, the whole block.
    const content = Buffer.from(await rec.readFully(false));
    const uri = rec.warcTargetURI || "-";
    if (rec.warcType === "response") {
      responses++;
      const want = rec.warcHeader("WARC-Payload-Digest");
      if (want && sha1(content) !== want) problem(`${file}: ${uri}: payload digest ${want}, warcio reads ${sha1(content)}`);
    } else if (rec.warcType === "resource" && (rec.warcTargetURI || "").startsWith("urn:dom:")) {
      doms++;
      const want = rec.warcHeader("WARC-Payload-Digest");
      if (sha1(content) !== want) problem(`${file}: ${uri}: DOM payload digest ${want}, warcio reads ${sha1(content)}`);
      if (!(rec.warcContentType || "").startsWith("text/html")) problem(`${file}: ${uri}: DOM typed ${rec.warcContentType}`);
    } else if (!rec.httpHeaders) {
      const want = rec.warcHeader("WARC-Block-Digest");
      if (want && sha1(content) !== want) problem(`${file}: ${rec.warcType} ${uri}: block digest ${want}, warcio reads ${sha1(content)}`);
    }
  }

  for (const [uri, id] of links) if (!ids.has(id)) problem(`${file}: ${uri}: WARC-Concurrent-To ${id} names no record of the file`);

  const cdxj = file.replace(/\.warc\.gz$/, ".cdxj");
  if (!fs.existsSync(cdxj)) {
    problem(`${file}: no ${cdxj} beside it`);
    continue;
  }
  const ours = new Map();
  for (const line of fs.readFileSync(cdxj, "utf8").split("\n").filter(Boolean)) {
    const j = JSON.parse(line.slice(line.indexOf("{")));
    ours.set(`${j.url} ${j.offset}`, j);
  }
  let found = 0;
  const indexer = new CDXIndexer({ format: "cdxj" }, null);
  for await (const c of indexer.iterIndex([{ reader: fs.createReadStream(file), filename: file }])) {
    const j = ours.get(`${c.url} ${c.offset}`);
    if (!j) continue;
    found++;
    const digestsDiffer = j.digest && c.digest && j.digest !== c.digest && j.digest !== "sha1:" + c.digest;
    if (String(j.length) !== String(c.length) || digestsDiffer) {
      problem(`${cdxj}: ${c.url} at ${c.offset}: Trawl says length ${j.length} digest ${j.digest}; warcio ${c.length} ${c.digest}`);
    }
  }
  indexed += found;
  if (found !== ours.size) problem(`${cdxj}: ${ours.size} lines, warcio finds ${found} of them at the same offsets`);
}
console.log(`warcio read ${records} records (${responses} responses, ${doms} rendered DOMs, ${indexed} index lines matched) in ${process.argv.length - 2} files; ${problems} problems`);
process.exit(problems || process.argv.length < 3 ? 1 : 0);
