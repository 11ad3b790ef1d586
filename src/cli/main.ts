console.log("oncely CLI: not yet");
