// What the viewer page imports: moq-dev's MoQ client (WebTransport), its player for the hang media
// format (@moq/watch: catalog, WebCodecs decode, canvas rendering) and a msgpack decoder for bags.
import * as Moq from "@moq/lite";
import * as Watch from "@moq/watch";
import { decode } from "@msgpack/msgpack";
export { Moq, Watch, decode };
