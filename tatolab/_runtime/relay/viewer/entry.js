// What the viewer page imports: moq-dev's MoQ client (WebTransport), its player for the hang media
// format (@moq/watch: catalog, WebCodecs decode, canvas rendering) and a msgpack decoder for bags.
import * as Moq from "@moq/lite";
import * as Watch from "@moq/watch";
import { decode } from "@msgpack/msgpack";

// The relay's publisher (moq-rs) ends each H.264 group with an empty frame: a marker saying where the
// group's content stops, not a picture. @moq/watch 0.2 hands it to WebCodecs as a chunk, which
// rejects it ("EncodingError: Null or empty decoder buffer") and the player closes its subscription:
// the picture froze a second or so after each page opened. Newer @moq/hang skips the marker; so does
// this decoder. A decoder's real errors are also told to the page (a "decoder-error" event on
// window), so it can say why the picture stopped.
const Native = globalThis.VideoDecoder;
if (Native) {
  globalThis.VideoDecoder = class VideoDecoder extends Native {
    constructor(init) {
      super({
        ...init,
        error: (error) => {
          window.dispatchEvent(new CustomEvent("decoder-error", { detail: String(error) }));
          init.error(error);
        },
      });
    }

    decode(chunk) {
      if (chunk.byteLength > 0) super.decode(chunk);
    }
  };
}

export { Moq, Watch, decode };
