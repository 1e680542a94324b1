;;; forj-provider-test.el --- Provider wire formats through real curl  -*- lexical-binding: t; -*-

;;; Commentary:

;; Each provider family against a local server (fake_provider.py) that
;; replays that family's streaming wire format, errors included; every
;; request goes through the real curl.

;;; Code:

(require 'ert)
(require 'forj-chat)
(require 'forj-epc-test)

(defvar forj-provider-test--server nil "The fake provider process.")
(defvar forj-provider-test--port nil "Its port.")
(defvar forj-provider-test--log nil "The file it logs requests to.")

(defconst forj-provider-test--dir
  (file-name-directory (or load-file-name buffer-file-name))
  "This directory.")

(defun forj-provider-test--server ()
  "Start the fake provider once; return its port."
  (unless (process-live-p forj-provider-test--server)
    (setq forj-provider-test--log (make-temp-file "forj-fake-log-")
          forj-provider-test--port nil)
    (setq forj-provider-test--server
          (make-process
           :name "forj-fake-provider" :noquery t :connection-type 'pipe
           :command (list forj-test--python
                          (expand-file-name "fake_provider.py" forj-provider-test--dir)
                          forj-provider-test--log)
           ;; The port may arrive in pieces: it is read from the whole first line.
           :filter (let ((seen ""))
                     (lambda (_p out)
                       (setq seen (concat seen out))
                       (when (and (null forj-provider-test--port)
                                  (string-match "\\`\\([0-9]+\\)\n" seen))
                         (setq forj-provider-test--port
                               (string-to-number (match-string 1 seen))))))))
    (forj-test--wait-for (lambda () forj-provider-test--port) 20))
  forj-provider-test--port)

(defun forj-provider-test--provider (family case &rest more)
  "A provider of FAMILY pointed at the fake server's scenario CASE, plus MORE."
  (append (list :name (format "fake-%s" family) :family family :model "fake-model"
                :url (format "http://127.0.0.1:%d/%s-%s/v1" (forj-provider-test--server) family case)
                :key-env '("FORJ_TEST_PROVIDER_KEY"))
          more))

(defvar forj-provider-test--messages nil
  "The messages `forj-provider-test--run' sends, when not nil.")

(defun forj-provider-test--run (provider &optional tools on-wait)
  "Run one request to PROVIDER; return (:text :calls :error :done :stop :waits :command).
ON-WAIT, if given, is also called with the stream and each wait's arguments."
  (let* ((text "") (calls nil) (error nil) (done nil) (stop nil) (waits nil) (stream nil)
         (process-environment (cons "FORJ_TEST_PROVIDER_KEY=sk-test-SECRET-123" process-environment)))
    (setq stream (forj-provider-start
                  provider "You are a test." (or forj-provider-test--messages
                                                 (list (list :role "user" :text "Hi")))
                  tools
                  (list :on-text (lambda (s) (setq text (concat text s)))
                        :on-call (lambda (c) (push c calls))
                        :on-stop (lambda (info) (setq stop info))
                        :on-wait (lambda (seconds attempt message)
                                   (push (list seconds attempt message) waits)
                                   (when on-wait (funcall on-wait stream seconds attempt message)))
                        :on-done (lambda () (setq done t))
                        :on-error (lambda (m) (setq error m)))))
    (forj-test--wait-for (lambda () (or done error (not (forj-provider-stream-live-p stream)))) 20)
    (list :text text :calls (nreverse calls) :error error :done done :stop stop
          :waits (nreverse waits)
          :command (and (forj-provider-stream-process stream)
                        (process-command (forj-provider-stream-process stream))))))

(defun forj-provider-test--requests (scenario)
  "How many requests the fake server logged for SCENARIO (a path's first segment).
Questions about the model's window (forj-window.el) are not counted."
  (with-temp-buffer
    (insert-file-contents forj-provider-test--log)
    (cl-count-if (lambda (line)
                   (and (string-match-p (concat "\"path\": \"/" (regexp-quote scenario) "/") line)
                        (not (string-match-p (regexp-quote forj-window-user-agent) line))))
                 (split-string (buffer-string) "\n" t))))

(defun forj-provider-test--last-request ()
  "The last request the fake server logged, as a plist."
  (with-temp-buffer
    (insert-file-contents forj-provider-test--log)
    (goto-char (point-max))
    (forward-line -1)
    (json-parse-string (buffer-substring (point) (line-end-position)) :object-type 'plist)))

(defconst forj-provider-test--tools
  [(:name "read_file" :description "Read a file"
          :parameters (:type "object" :properties (:path (:type "string")) :required ["path"]))]
  "A tool definition as the worker gives it.")

(defconst forj-provider-test--auth
  '((openai "authorization" "Bearer sk-test-SECRET-123")
    (anthropic "x-api-key" "sk-test-SECRET-123")
    (gemini "x-goog-api-key" "sk-test-SECRET-123"))
  "Where each family sends the key.")

(defun forj-provider-test--header (headers name)
  "The value of header NAME (any case) in the plist HEADERS."
  (cl-loop for (key value) on headers by #'cddr
           when (equal (downcase (substring (symbol-name key) 1)) name)
           return value))

(ert-deftest forj-test-provider-streams-text-in-each-family ()
  "Each family streams text to the end; the key goes in a header, never on curl's command line."
  (dolist (family '(openai anthropic gemini))
    (let ((run (forj-provider-test--run (forj-provider-test--provider family "text"))))
      (should (plist-get run :done))
      (should-not (plist-get run :error))
      (should (equal (plist-get run :text) "Hello, world"))
      (should-not (cl-some (lambda (arg) (string-match-p "SECRET" arg)) (plist-get run :command)))
      ;; The user's ~/.curlrc is not read (-q must come first).
      (should (equal (nth 1 (plist-get run :command)) "-q"))
      (let* ((request (forj-provider-test--last-request))
             (headers (plist-get request :headers))
             (auth (alist-get family forj-provider-test--auth)))
        (should (equal (forj-provider-test--header headers (car auth)) (cadr auth)))
        (should (string-match-p "You are a test" (plist-get request :body)))
        (pcase family
          ('openai (should (string-suffix-p "/v1/chat/completions" (plist-get request :path))))
          ('anthropic (should (string-suffix-p "/v1/messages" (plist-get request :path)))
                      (should (equal (forj-provider-test--header headers "anthropic-version")
                                     "2023-06-01")))
          ('gemini (should (string-suffix-p "/models/fake-model:streamGenerateContent?alt=sse"
                                            (plist-get request :path)))))))))

(ert-deftest forj-test-provider-native-calls-are-normalized ()
  "Native function calls of each family arrive as (:id :name :args) with whole arguments."
  (dolist (family '(openai anthropic gemini))
    (let* ((run (forj-provider-test--run
                 (forj-provider-test--provider family "tools" :native-tools t)
                 forj-provider-test--tools))
           (call (car (plist-get run :calls)))
           (body (plist-get (forj-provider-test--last-request) :body)))
      (should (plist-get run :done))
      (should (= (length (plist-get run :calls)) 1))
      (should (equal (plist-get call :name) "read_file"))
      (should (stringp (plist-get call :id)))
      (should (equal (forj-tools-json-encode (plist-get call :args)) "{\"path\":\"a.txt\"}"))
      ;; The tools were advertised in the family's own shape.
      (should (string-match-p (pcase family
                                ('openai "\"tools\":\\[{\"type\":\"function\"")
                                ('anthropic "\"input_schema\"")
                                ('gemini "\"functionDeclarations\""))
                              body)))))

(ert-deftest forj-test-provider-http-errors-show-the-providers-message ()
  "401, 429 with Retry-After, an HTML 502: the provider's own words reach the user."
  (dolist (family '(openai anthropic gemini))
   (let ((forj-provider-retries 0))
    (let ((err (plist-get (forj-provider-test--run (forj-provider-test--provider family "unauthorized"))
                          :error)))
      (should (string-match-p "HTTP 401 (the API key was refused): Incorrect API key provided" err)))
    (let ((err (plist-get (forj-provider-test--run (forj-provider-test--provider family "ratelimited"))
                          :error)))
      (should (string-match-p "HTTP 429 (rate limited): Rate limit reached, slow down" err))
      (should (string-match-p "retry after 7 seconds" err)))
    (let ((err (plist-get (forj-provider-test--run (forj-provider-test--provider family "html")) :error)))
      (should (string-match-p "HTTP 502 (the provider failed): 502 Bad Gateway" err))
      (should-not (string-match-p "<h1>" err))))))

(ert-deftest forj-test-provider-broken-streams ()
  "An empty body, a page that is not a stream, a stream cut mid-event: each is a clear error."
  (dolist (family '(openai anthropic gemini))
    (should (string-match-p "reply was empty"
                            (plist-get (forj-provider-test--run (forj-provider-test--provider family "empty"))
                                       :error)))
    (should (string-match-p "not an event stream: Sign in to continue"
                            (plist-get (forj-provider-test--run (forj-provider-test--provider family "notsse"))
                                       :error)))
    ;; Only a local server's empty reply points at its context window.
    (should-not (string-match-p "context window"
                                (plist-get (forj-provider-test--run (forj-provider-test--provider family "empty"))
                                           :error)))
    (should (string-match-p "reply was empty.*longer than its context window.*:context-window"
                            (plist-get (forj-provider-test--run
                                        (forj-provider-test--provider family "empty" :local t))
                                       :error)))
    (let ((run (forj-provider-test--run (forj-provider-test--provider family "cut"))))
      (should (string-match-p "cut before it finished" (plist-get run :error)))
      ;; What arrived before the cut is kept.
      (should (string-prefix-p (if (eq family 'anthropic) "Hello" "Half a") (plist-get run :text))))))

(ert-deftest forj-test-provider-invalid-utf-8-is-shown-not-fatal ()
  "Invalid UTF-8 in a stream becomes U+FFFD; the reply completes."
  (dolist (family '(openai anthropic gemini))
    (let ((run (forj-provider-test--run (forj-provider-test--provider family "badutf8"))))
      (should (plist-get run :done))
      (should (string-match-p "caf\ufffd \ufffd" (plist-get run :text))))))

(ert-deftest forj-test-provider-anthropic-error-event ()
  "An error event in the middle of a stream ends it with the provider's message."
  (let ((run (forj-provider-test--run (forj-provider-test--provider 'anthropic "overloaded"))))
    (should (equal (plist-get run :text) "Hello"))
    (should (equal (plist-get run :error) "The provider reported an error in its reply: Overloaded (overloaded_error)"))))

(ert-deftest forj-test-provider-no-key-and-no-server ()
  "A missing key names the variables to set; a refused connection is curl's own message."
  (let ((err (plist-get (forj-provider-test--run
                         (list :name "nokey" :family 'openai :model "m" :url "http://127.0.0.1:9/v1"
                               :key-env '("FORJ_TEST_NO_SUCH_KEY")))
                        :error)))
    (should (string-match-p "No API key for nokey: set one of FORJ_TEST_NO_SUCH_KEY" err)))
  (let ((err (plist-get (forj-provider-test--run
                         (list :name "local" :family 'openai :model "m" :url "http://127.0.0.1:9/v1"
                               :local t))
                        :error)))
    (should (string-match-p "curl exit 7" err))))

(ert-deftest forj-test-provider-refusals-show-the-providers-reason ()
  "Refusals and safety blocks of each family end the reply with the provider's reason."
  (pcase-dolist (`(,family ,case ,text ,reason)
                 '((anthropic "refusal" "Hello, world" "stop_reason \"refusal\"")
                   (anthropic "refusalbare" "" "stop_reason \"refusal\"")
                   (openai "refusal" "" "\\`I'm sorry, I can't help with that.\\'")
                   (openai "filter" "Here is" "content_filter")
                   (gemini "safety" "Here" "finishReason SAFETY (DANGEROUS_CONTENT)")
                   (gemini "blocked" "" "blockReason PROHIBITED_CONTENT (HATE_SPEECH)")))
    (let* ((run (forj-provider-test--run (forj-provider-test--provider family case)))
           (stop (plist-get run :stop)))
      (should (plist-get run :done))
      (should-not (plist-get run :error))
      (should (equal (plist-get run :text) text))
      (should (eq (plist-get stop :kind) 'refusal))
      (should (string-match-p reason (plist-get stop :reason))))))

(ert-deftest forj-test-provider-token-limit-cuts-are-reported-and-cut-calls-dropped ()
  "A reply cut by the token limit says so; a native call cut in the middle is not a call."
  (pcase-dolist (`(,family ,case ,text ,reason)
                 '((anthropic "maxtokens" "Hello, world" "max_tokens")
                   (openai "length" "A long answer that" "length")
                   (gemini "maxtokens" "Hello, wor" "MAX_TOKENS")))
    (let* ((run (forj-provider-test--run (forj-provider-test--provider family case)))
           (stop (plist-get run :stop)))
      (should (plist-get run :done))
      (should (equal (plist-get run :text) text))
      (should (eq (plist-get stop :kind) 'length))
      (should (string-match-p reason (plist-get stop :reason)))
      (should-not (plist-get stop :cut-call))))
  (dolist (family '(anthropic openai))
    (let* ((run (forj-provider-test--run (forj-provider-test--provider family "cuttool" :native-tools t)
                                         forj-provider-test--tools))
           (stop (plist-get run :stop)))
      (should (plist-get run :done))
      (should (eq (plist-get stop :kind) 'length))
      (should (equal (plist-get stop :cut-call) "write_file"))
      (should-not (plist-get run :calls))))
  ;; A whole call before the end is still a call, with no stop.
  (let ((run (forj-provider-test--run (forj-provider-test--provider 'anthropic "tools" :native-tools t)
                                      forj-provider-test--tools)))
    (should (= (length (plist-get run :calls)) 1))
    (should-not (plist-get run :stop))))

(ert-deftest forj-test-provider-429-and-5xx-are-retried-honouring-retry-after ()
  "429 with Retry-After waits that long and tries again; 5xx backs off; a long wait is not taken."
  (dolist (family '(openai anthropic gemini))
    (let* ((tag (format "ratelimitedonce.%s" (random 1000000)))
           (scenario (format "%s-%s" family tag))
           (run (forj-provider-test--run (forj-provider-test--provider family tag))))
      (should (plist-get run :done))
      (should (equal (plist-get run :text) "Hello, world"))
      (should (equal (mapcar #'butlast (plist-get run :waits)) '((1 1))))
      (should (string-match-p "HTTP 429 (rate limited): Rate limit reached"
                              (nth 2 (car (plist-get run :waits)))))
      (should (= (forj-provider-test--requests scenario) 2))))
  (let* ((forj-provider-retry-backoff 0.05)
         (tag (format "overloadedtwice.%s" (random 1000000)))
         (run (forj-provider-test--run (forj-provider-test--provider 'anthropic tag))))
    (should (plist-get run :done))
    ;; Exponential: the second wait is twice the first.
    (should (equal (mapcar #'butlast (plist-get run :waits)) '((0.05 1) (0.1 2))))
    (should (string-match-p "HTTP 529 (the provider failed): Overloaded" (nth 2 (car (plist-get run :waits))))))
  (let ((run (forj-provider-test--run (forj-provider-test--provider 'openai "ratelimitedlong"))))
    (should-not (plist-get run :waits))
    (should (string-match-p "HTTP 429 (rate limited): Daily quota used up.*retry after 3600 seconds"
                            (plist-get run :error))))
  (let* ((forj-provider-retries 1)
         (forj-provider-retry-backoff 0.05)
         (run (forj-provider-test--run (forj-provider-test--provider 'openai "html"))))
    (should (= (length (plist-get run :waits)) 1))
    (should (string-match-p "HTTP 502 .*(sent 2 times)" (plist-get run :error)))))

(ert-deftest forj-test-provider-stopping-a-retry-wait-sends-nothing-more ()
  "Stopping while a retry waits: no more requests, no callback."
  (let* ((tag (format "ratelimitedonce.%s" (random 1000000)))
         (scenario (concat "openai-" tag))
         (run (forj-provider-test--run
               (forj-provider-test--provider 'openai tag)
               nil
               (lambda (stream &rest _) (forj-provider-stop stream)))))
    (should (= (length (plist-get run :waits)) 1))
    (accept-process-output nil 1.5)
    (should-not (plist-get run :done))
    (should-not (plist-get run :error))
    (should (= (forj-provider-test--requests scenario) 1))))

;;; What providers need back, ids, silence, errors in a stream, keys

(defun forj-provider-test--body ()
  "The JSON body of the last request the fake server logged, parsed."
  (forj-provider-json (plist-get (forj-provider-test--last-request) :body)))

(ert-deftest forj-test-provider-gemini-thought-signature-goes-back-with-its-call ()
  "A functionCall's thoughtSignature is kept with the call and sent back unchanged with it."
  (let* ((run (forj-provider-test--run (forj-provider-test--provider 'gemini "signature" :native-tools t)
                                       forj-provider-test--tools))
         (call (car (plist-get run :calls))))
    (should (plist-get run :done))
    (should (equal (plist-get run :text) "Reading."))
    (should (equal (plist-get (plist-get call :native) :thoughtSignature) "SIG-CALL-1"))
    ;; The call goes back as the record keeps it: through the JSON of a
    ;; tool-call block.
    (let* ((kept (forj-tools-json-decode (forj-tools-json-encode call)))
           (forj-provider-test--messages
            (list (list :role "user" :text "Hi")
                  (list :role "assistant" :text "Reading." :calls (list kept))
                  (list :role "tool" :results (list (list :id (plist-get kept :id) :name "read_file"
                                                          :content "{\"ok\":true}")))))
           (run (forj-provider-test--run (forj-provider-test--provider 'gemini "text" :native-tools t)
                                         forj-provider-test--tools))
           (contents (plist-get (forj-provider-test--body) :contents))
           (model (aref contents 1))
           (part (cl-find-if (lambda (p) (plist-get p :functionCall)) (plist-get model :parts))))
      (should (plist-get run :done))
      (should (equal (plist-get model :role) "model"))
      (should (equal (plist-get part :thoughtSignature) "SIG-CALL-1"))
      (should (equal (plist-get (plist-get part :functionCall) :name) "read_file")))))

(ert-deftest forj-test-provider-gemini-finish-reasons-are-told ()
  "SAFETY, RECITATION and MAX_TOKENS end the reply with Gemini's reason."
  (pcase-dolist (`(,case ,kind ,reason)
                 '(("safety" refusal "finishReason SAFETY")
                   ("recitation" refusal "finishReason RECITATION")
                   ("maxtokens" length "finishReason MAX_TOKENS")))
    (let* ((run (forj-provider-test--run (forj-provider-test--provider 'gemini case)))
           (stop (plist-get run :stop)))
      (should (plist-get run :done))
      (should (eq (plist-get stop :kind) kind))
      (should (string-match-p reason (plist-get stop :reason))))))

(ert-deftest forj-test-provider-anthropic-thinking-goes-back-before-its-tool-use ()
  "Thinking and redacted_thinking blocks are kept whole and sent back, unchanged, before their tool_use."
  (let* ((run (forj-provider-test--run
               (forj-provider-test--provider 'anthropic "thinking" :native-tools t :thinking 2048)
               forj-provider-test--tools))
         (call (car (plist-get run :calls)))
         (request (forj-provider-test--body))
         (before (plist-get (plist-get call :native) :before)))
    (should (plist-get run :done))
    (should (equal (plist-get request :thinking) '(:type "enabled" :budget_tokens 2048)))
    (should (> (plist-get request :max_tokens) 2048))
    (should (equal (plist-get call :id) "toolu_think"))
    (should (equal (append before nil)
                   '((:type "thinking" :thinking "The user wants a.txt; I will read it."
                            :signature "EqQBCkYIARgCKkBSIG-thinking-signature==")
                     (:type "redacted_thinking"
                            :data "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"))))
    ;; The thinking is not shown as text.
    (should (equal (plist-get run :text) ""))
    (let* ((kept (forj-tools-json-decode (forj-tools-json-encode call)))
           (forj-provider-test--messages
            (list (list :role "user" :text "Hi")
                  (list :role "assistant" :text "Reading it." :calls (list kept))
                  (list :role "tool" :results (list (list :id "toolu_think" :name "read_file"
                                                          :content "{\"ok\":true}")))))
           (run (forj-provider-test--run
                 (forj-provider-test--provider 'anthropic "text" :native-tools t :thinking 2048)
                 forj-provider-test--tools))
           (assistant (aref (plist-get (forj-provider-test--body) :messages) 1))
           (content (append (plist-get assistant :content) nil)))
      (should (plist-get run :done))
      (should (equal (mapcar (lambda (b) (plist-get b :type)) content)
                     '("thinking" "redacted_thinking" "text" "tool_use")))
      (should (equal (nth 0 content) (aref before 0)))
      (should (equal (nth 1 content) (aref before 1)))
      (should (equal (plist-get (nth 3 content) :id) "toolu_think")))))

(ert-deftest forj-test-provider-anthropic-pause-turn-is-a-stop-of-its-own ()
  "stop_reason pause_turn ends the reply as a pause, not as the end of the turn."
  (let* ((run (forj-provider-test--run (forj-provider-test--provider 'anthropic "pause")))
         (stop (plist-get run :stop)))
    (should (plist-get run :done))
    (should (equal (plist-get run :text) "Hello, world"))
    (should (eq (plist-get stop :kind) 'pause))
    (should (string-match-p "pause_turn" (plist-get stop :reason)))))

(ert-deftest forj-test-provider-anthropic-maps-foreign-tool-ids ()
  "Ids of other providers that Anthropic refuses are mapped, the same for the call and its result."
  (let* ((forj-provider-test--messages
          (list (list :role "user" :text "Hi")
                (list :role "assistant" :text ""
                      :calls (list (list :id "functions.read_file:0" :name "read_file" :args '(:path "a"))
                                   (list :id "functions.read_file:1" :name "read_file" :args '(:path "b"))))
                (list :role "tool"
                      :results (list (list :id "functions.read_file:0" :name "read_file" :content "A")
                                     (list :id "functions.read_file:1" :name "read_file" :content "B")))))
         (run (forj-provider-test--run (forj-provider-test--provider 'anthropic "text" :native-tools t)
                                       forj-provider-test--tools))
         (messages (plist-get (forj-provider-test--body) :messages))
         (uses (append (plist-get (aref messages 1) :content) nil))
         (results (append (plist-get (aref messages 2) :content) nil)))
    (should (plist-get run :done))
    (should (= (length uses) 2))
    (cl-loop for use in uses
             for result in results
             do (should (string-match-p "\\`[A-Za-z0-9_-]+\\'" (plist-get use :id)))
             do (should (equal (plist-get use :id) (plist-get result :tool_use_id))))
    (should-not (equal (plist-get (nth 0 uses) :id) (plist-get (nth 1 uses) :id)))))

(ert-deftest forj-test-provider-made-up-ids-are-unique-across-replies ()
  "A server that sends no call ids, and Gemini, never give the same id twice."
  (pcase-dolist (`(,family ,case) '((openai "noids") (gemini "tools")))
    (let ((ids (cl-loop repeat 2
                        collect (plist-get (car (plist-get (forj-provider-test--run
                                                            (forj-provider-test--provider
                                                             family case :native-tools t)
                                                            forj-provider-test--tools)
                                                           :calls))
                                           :id))))
      (should (cl-every (lambda (id) (and (stringp id) (not (string-empty-p id)))) ids))
      (should-not (equal (nth 0 ids) (nth 1 ids))))))

(ert-deftest forj-test-provider-server-error-inside-a-200-stream-is-shown ()
  "llama.cpp's error in the stream (a data object or an error: line) is shown, not an empty reply."
  (dolist (case '("streamerror" "errorline"))
    (let ((err (plist-get (forj-provider-test--run (forj-provider-test--provider 'openai case :local t))
                          :error)))
      (should (string-match-p "Requested tokens (25227) exceed context window of 8192" err))
      (should-not (string-match-p "empty" err))))
  (dolist (family '(openai anthropic gemini))
    (let ((err (plist-get (forj-provider-test--run (forj-provider-test--provider family "error200"))
                          :error)))
      (should (string-match-p "HTTP 200 with an error.*The model fake-model does not exist" err)))))

(ert-deftest forj-test-provider-silent-servers-end-in-a-visible-error ()
  "A server that never answers, or stalls mid-stream, is given up after its timeout."
  (let* ((forj-provider-first-byte-timeout 1)
         (started (float-time))
         (run (forj-provider-test--run (forj-provider-test--provider 'openai "hang"))))
    (should (< (- (float-time) started) 10))
    (should-not (plist-get run :done))
    (should (string-match-p "did not answer.*forj-provider-first-byte-timeout" (plist-get run :error))))
  ;; A provider's own :first-byte-timeout wins.
  (let* ((forj-provider-first-byte-timeout 600)
         (started (float-time))
         (run (forj-provider-test--run (forj-provider-test--provider 'gemini "hang" :first-byte-timeout 1))))
    (should (< (- (float-time) started) 10))
    (should (string-match-p "did not answer" (plist-get run :error))))
  ;; The idle timeout alone bounds the wait for the first event too.
  (let* ((forj-provider-idle-timeout 1)
         (started (float-time))
         (run (forj-provider-test--run (forj-provider-test--provider 'anthropic "hang"))))
    (should (< (- (float-time) started) 10))
    (should-not (plist-get run :done))
    (should (string-match-p "did not answer.*forj-provider-first-byte-timeout" (plist-get run :error))))
  (let* ((forj-provider-idle-timeout 1)
         (run (forj-provider-test--run (forj-provider-test--provider 'gemini "stall"))))
    (should (equal (plist-get run :text) "Hello"))
    (should (string-match-p "stopped sending in the middle of the reply.*forj-provider-idle-timeout"
                            (plist-get run :error)))))

(ert-deftest forj-test-provider-key-never-shown-and-its-source-named ()
  "A 401 that echoes the key names where the key came from and never shows it; streamed text neither."
  (dolist (family '(openai anthropic gemini))
    (let ((err (plist-get (forj-provider-test--run (forj-provider-test--provider family "echokey"))
                          :error)))
      (should (string-match-p "HTTP 401" err))
      (should-not (string-match-p "SECRET" err))
      (should (string-match-p (regexp-quote forj-provider-redacted) err))
      (should (string-match-p "the key came from the environment variable FORJ_TEST_PROVIDER_KEY" err))))
  (let ((run (forj-provider-test--run (forj-provider-test--provider 'openai "keytext"))))
    (should (plist-get run :done))
    (should (equal (plist-get run :text) (concat "Your key is " forj-provider-redacted " and more."))))
  (let ((run (forj-provider-test--run (forj-provider-test--provider 'openai "keycall" :native-tools t)
                                      forj-provider-test--tools)))
    (should (equal (forj-tools-json-encode (plist-get (car (plist-get run :calls)) :args))
                   (format "{\"path\":\"k\",\"content\":[\"%s\"]}" forj-provider-redacted))))
  (let ((run (forj-provider-test--run (forj-provider-test--provider 'openai "keycut"))))
    (should (plist-get run :done))
    (should (equal (plist-get run :text) (concat "Your key is " forj-provider-redacted)))))

(ert-deftest forj-test-models-cloud-lists-from-endpoint-with-offline-fallback ()
  "Each cloud family's models endpoint is asked with its key; unreachable, the known list stands."
  (let ((process-environment (cons "FORJ_TEST_PROVIDER_KEY=sk-test-SECRET-123" process-environment)))
    (pcase-dolist (`(,family ,expected ,auth)
                   '((gemini ("gemini-9-pro" "gemini-9-flash") "x-goog-api-key")
                     (anthropic ("claude-test-9" "claude-test-8") "x-api-key")
                     (openai ("local-coder" "local-small") "authorization")))
      (let* ((provider (forj-provider-test--provider family "list" :name (format "list-%s" family)
                                                     :models '("offline-1")))
             (provider (cons :name (cons (format "list-%s" family) provider)))
             (got 'waiting))
        (forj-models-list provider (lambda (models _why) (setq got models)))
        (should (forj-test--wait-for (lambda () (not (eq got 'waiting))) 10))
        (should (equal got expected))
        (let* ((request (forj-provider-test--last-request))
               (headers (plist-get request :headers)))
          (should (string-match-p "/models" (plist-get request :path)))
          (should (string-match-p "SECRET" (forj-provider-test--header headers auth))))
        (should (equal (forj-models-of provider) (cons "fake-model" expected)))))
    (let* ((provider (list :name "list-down" :family 'anthropic :model "claude-sonnet-4-6"
                           :models '("claude-opus-4-7") :url "http://127.0.0.1:9/v1"
                           :key-env '("FORJ_TEST_PROVIDER_KEY")))
           (why 'waiting))
      (forj-models-list provider (lambda (_models reason) (setq why reason)))
      (should (forj-test--wait-for (lambda () (not (eq why 'waiting))) 10))
      (should (string-match-p "does not answer" why))
      (should (equal (forj-models-of provider) '("claude-sonnet-4-6" "claude-opus-4-7"))))))

(ert-deftest forj-test-provider-gemini-call-ids-go-back-when-gemini-gave-them ()
  "A call Gemini gave an id goes back with it, and its result too, whatever forj calls it."
  (let* ((run (forj-provider-test--run (forj-provider-test--provider 'gemini "withids" :native-tools t)
                                       forj-provider-test--tools))
         (call (car (plist-get run :calls))))
    (should (equal (plist-get call :id) "fc-123"))
    (let* ((kept (plist-put (forj-tools-json-decode (forj-tools-json-encode call)) :id "renamed-1"))
           (forj-provider-test--messages
            (list (list :role "user" :text "Hi")
                  (list :role "assistant" :text "" :calls (list kept))
                  (list :role "tool" :results (list (list :id "renamed-1" :name "read_file" :content "A")))))
           (_ (forj-provider-test--run (forj-provider-test--provider 'gemini "text" :native-tools t)
                                       forj-provider-test--tools))
           (contents (plist-get (forj-provider-test--body) :contents))
           (part (aref (plist-get (aref contents 1) :parts) 0))
           (response (aref (plist-get (aref contents 2) :parts) 0)))
      (should (equal (plist-get (plist-get part :functionCall) :id) "fc-123"))
      (should (equal (plist-get part :thoughtSignature) "SIG-ID"))
      (should (equal (plist-get (plist-get response :functionResponse) :id) "fc-123")))))

(ert-deftest forj-test-provider-anthropic-tool-input-given-whole ()
  "A tool_use whose input comes whole in content_block_start keeps that input."
  (let* ((run (forj-provider-test--run (forj-provider-test--provider 'anthropic "wholeinput" :native-tools t)
                                       forj-provider-test--tools))
         (call (car (plist-get run :calls))))
    (should (plist-get run :done))
    (should (equal (forj-tools-json-encode (plist-get call :args)) "{\"path\":\"a.txt\"}"))))

(ert-deftest forj-test-provider-openai-calls-without-index-stay-apart ()
  "Calls sent whole, each without an index, are two calls, not one."
  (let ((run (forj-provider-test--run (forj-provider-test--provider 'openai "noindex" :native-tools t)
                                      forj-provider-test--tools)))
    (should (plist-get run :done))
    (should (equal (mapcar (lambda (c) (plist-get (plist-get c :args) :path)) (plist-get run :calls))
                   '("a.txt" "b.txt")))))

(ert-deftest forj-test-provider-vllm-error-object-and-gemini-bad-key ()
  "vLLM's error object in the stream is shown; Gemini's 400 for a bad key names the key's source."
  (let ((err (plist-get (forj-provider-test--run (forj-provider-test--provider 'openai "vllmerror" :local t))
                        :error)))
    (should (string-match-p "maximum context length is 4096 tokens" err)))
  (let ((err (plist-get (forj-provider-test--run (forj-provider-test--provider 'gemini "badkey")) :error)))
    (should (string-match-p "HTTP 400: API key not valid" err))
    (should (string-match-p "the key came from the environment variable FORJ_TEST_PROVIDER_KEY" err))))

(provide 'forj-provider-test)
;;; forj-provider-test.el ends here
