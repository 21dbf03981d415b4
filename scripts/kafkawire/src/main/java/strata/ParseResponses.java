package strata;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;

import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.requests.AbstractResponse;
import org.apache.kafka.common.requests.RequestHeader;

/**
 * Parses Kafka response frames the way kafka-clients does when they come
 * off the wire. Each line of standard input is "API_KEY VERSION
 * CORRELATION_ID HEX", HEX being a response frame without its size
 * prefix; each line of output is "ok" and the answer as kafka-clients
 * reads it, or "error" and why it could not.
 */
public final class ParseResponses {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        for (String line; (line = in.readLine()) != null; ) {
            String[] f = line.trim().split(" ");
            if (f.length != 4) {
                System.out.println("error: want API_KEY VERSION CORRELATION_ID HEX");
                continue;
            }
            try {
                ApiKeys key = ApiKeys.forId(Short.parseShort(f[0]));
                short version = Short.parseShort(f[1]);
                RequestHeader header = new RequestHeader(key, version, "strata-conformance", Integer.parseInt(f[2]));
                ByteBuffer frame = ByteBuffer.wrap(HexFormat.of().parseHex(f[3]));
                AbstractResponse resp = AbstractResponse.parseResponse(frame, header);
                String left = frame.hasRemaining() ? " (" + frame.remaining() + " bytes left over)" : "";
                System.out.println("ok " + resp.data() + left);
            } catch (Exception | Error e) {
                System.out.println("error " + e.toString().replace('\n', ' '));
            }
        }
    }
}
