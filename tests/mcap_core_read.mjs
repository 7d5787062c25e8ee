// Reads an MCAP file with @mcap/core (zstd chunks through fzstd) and prints what it found as JSON (test_recorder_files.py).
import { McapIndexedReader } from "@mcap/core";
import { decompress } from "fzstd";
import { open } from "node:fs/promises";

const handle = await open(process.argv[2], "r");
const readable = {
  size: async () => BigInt((await handle.stat()).size),
  read: async (offset, length) => {
    const buffer = new Uint8Array(Number(length));
    await handle.read(buffer, 0, Number(length), Number(offset));
    return buffer;
  },
};
const reader = await McapIndexedReader.Initialize({
  readable,
  decompressHandlers: { zstd: (data, size) => decompress(data, new Uint8Array(Number(size))) },
});
const counts = {};
const first = {};
for (const channel of reader.channelsById.values()) counts[channel.topic] = 0;
for await (const message of reader.readMessages()) {
  const topic = reader.channelsById.get(message.channelId).topic;
  counts[topic] += 1;
  if (!(topic in first) && reader.channelsById.get(message.channelId).messageEncoding === "json") {
    first[topic] = JSON.parse(new TextDecoder().decode(message.data));
  }
}
const schemas = [...reader.schemasById.values()].map((s) => s.name).sort();
console.log(JSON.stringify({ counts, first, schemas, messages: Number(reader.statistics.messageCount) }));
await handle.close();
