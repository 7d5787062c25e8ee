// What the viewer page imports: moq-dev's MoQ client (WebTransport) and a msgpack decoder for bags.
import * as Moq from "@moq/lite";
import { decode } from "@msgpack/msgpack";
export { Moq, decode };
