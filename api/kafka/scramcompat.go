package kafka

import (
	"crypto/hmac"
	"encoding/base64"
	"strings"
)

// librdkafka (kcat, confluent-kafka-*) sends in its client-final message
// the nonce r = client nonce + the server's whole nonce, which already starts
// with the client nonce. RFC 5802 wants the server's nonce exactly, and so
// does xdg-go/scram; Apache Kafka accepts any nonce that ends with it
// (ScramSaslServer: clientFinalMessage.nonce().endsWith(...)), and
// librdkafka's proof covers the message as sent. So this one final message
// is verified here with Kafka's rule; every other SCRAM message goes
// through xdg-go/scram.

// scramAttr returns attribute key's value in a SCRAM message ("r" of
// "c=biws,r=abc,p=..." is "abc").
func scramAttr(msg, key string) (string, bool) {
	for _, f := range strings.Split(msg, ",") {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v, true
		}
	}
	return "", false
}

// librdkafkaFinal says whether msg is a client-final message whose nonce
// is not the server's but ends with it.
func librdkafkaFinal(serverFirst, msg string) bool {
	want, ok1 := scramAttr(serverFirst, "r")
	got, ok2 := scramAttr(msg, "r")
	return ok1 && ok2 && want != "" && got != want && strings.HasSuffix(got, want)
}

// scramFinalLenient checks a librdkafka client-final message against the
// user's stored credential and returns the server-final message.
func scramFinalLenient(a *Auth, mech, user, clientFirst, serverFirst, msg string) (string, bool) {
	cred, ok := a.credential(user, mech)
	h := scramHash(mech)
	// librdkafka never binds a channel: its gs2 header is "n,,", and the
	// final message's first attribute is that header in base64.
	bare, isN := strings.CutPrefix(clientFirst, "n,,")
	i := strings.LastIndex(msg, ",p=")
	if !ok || h == nil || !isN || i < 0 || !strings.HasPrefix(msg, "c=biws,") {
		return "", false
	}
	withoutProof := msg[:i]
	proof, err := base64.StdEncoding.DecodeString(msg[i+3:])
	if err != nil {
		return "", false
	}
	authMessage := []byte(bare + "," + serverFirst + "," + withoutProof)
	sig := hmac.New(h, cred.StoredKey)
	sig.Write(authMessage)
	clientSig := sig.Sum(nil)
	if len(proof) != len(clientSig) {
		return "", false
	}
	clientKey := make([]byte, len(proof))
	for j := range proof {
		clientKey[j] = proof[j] ^ clientSig[j]
	}
	stored := h()
	stored.Write(clientKey)
	if !hmac.Equal(stored.Sum(nil), cred.StoredKey) {
		return "", false
	}
	ver := hmac.New(h, cred.ServerKey)
	ver.Write(authMessage)
	return "v=" + base64.StdEncoding.EncodeToString(ver.Sum(nil)), true
}
