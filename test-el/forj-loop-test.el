;;; forj-loop-test.el --- The tool loop on a session, with no chat buffer  -*- lexical-binding: t; -*-

;;; Commentary:

;; The loop (forj-loop.el) driven on a bare session in a buffer with no
;; window and no chat mode: a scripted model asks for a tool, the real
;; worker runs it, the model is resumed and answers.  What the loop
;; tells the view is recorded, not drawn.

;;; Code:

(require 'ert)
(require 'forj-loop)
(require 'forj-epc-test)
(require 'forj-chat-test)
(require 'forj-provider-test)

(defun forj-loop-test--bodies (scenario)
  "The JSON bodies the fake server received for SCENARIO, oldest first, as plists."
  (with-temp-buffer
    (insert-file-contents forj-provider-test--log)
    (let ((bodies nil))
      (dolist (line (split-string (buffer-string) "\n" t))
        (let ((request (json-parse-string line :object-type 'plist)))
          ;; A question about the window is not a request for a reply.
          (when (and (plist-get request :body)
                     (not (string-match-p (regexp-quote forj-window-user-agent) line))
                     (string-prefix-p (concat "/" scenario "/") (plist-get request :path)))
            (push (json-parse-string (plist-get request :body) :object-type 'plist) bodies))))
      (nreverse bodies))))

(defun forj-loop-test--offered (family body)
  "The names of the tools a request BODY of provider FAMILY offers."
  (let ((tools (append (plist-get body :tools) nil)))
    (pcase family
      ('openai (mapcar (lambda (tool) (plist-get (plist-get tool :function) :name)) tools))
      ('anthropic (mapcar (lambda (tool) (plist-get tool :name)) tools))
      ('gemini (mapcar (lambda (tool) (plist-get tool :name))
                       (append (plist-get (car tools) :functionDeclarations) nil))))))

(defmacro forj-loop-test-with-session (provider &rest body)
  "Run BODY with a bare session on `root' asking PROVIDER; `events' holds the view's."
  (declare (indent 1) (debug t))
  `(let ((events nil))
     (with-temp-buffer
       (let ((output (point-marker)))
         (setq forj-session
               (forj-session-create
                :root root :root-confirmed t :provider ,provider
                :view-function (lambda (event &rest args)
                                 (push (cons event args) events)
                                 (pcase event
                                   ('output output)
                                   ('output-to nil)
                                   ('draft "")))))
         ,@body))))

(ert-deftest forj-test-loop-runs-a-turn-without-the-chat ()
  "The loop runs a whole turn on a session whose view only records events."
  (forj-test-with-project '(("notes.txt" . "remember the milk\n"))
    (let* ((script (forj-chat-test--script
                    (list (list :text (concat "Let me read it.\n\n"
                                              (forj-chat-test--block
                                               "{\"id\": \"r1\", \"name\": \"read_file\", \"args\": {\"path\": \"notes.txt\"}}")))
                          (list :text "The note says: remember the milk."))))
           (forj-provider-scripted-delay 0.001)
           (events nil))
      (unwind-protect
          (with-temp-buffer
            (let ((output (point-marker)))
              (setq forj-session
                    (forj-session-create
                     :root root :root-confirmed t
                     :provider (list :name "test-script" :family 'scripted :script script)
                     :view-function (lambda (event &rest _)
                                      (push event events)
                                      (pcase event
                                        ('output output)
                                        ('output-to nil)
                                        ('draft "")))))
              (forj-loop-send "What does notes.txt say?")
              (should (forj-test--wait-for (lambda () (eq (forj-session-state forj-session) 'idle)) 30))
              (should-not (derived-mode-p 'forj-chat-mode))
              (should-not (get-buffer-window))
              (let ((record (forj-session-record forj-session)))
                (should (equal (mapcar (lambda (e) (plist-get e :role)) record)
                               '("user" "assistant" "tool" "assistant")))
                (should (string-match-p "```tool-result\n{\"id\":\"r1\",\"name\":\"read_file\",\"ok\":true"
                                        (plist-get (nth 2 record) :text)))
                (should (string-match-p "remember the milk" (plist-get (nth 2 record) :text)))
                (should (equal (plist-get (nth 3 record) :text)
                               "## Assistant\n\nThe note says: remember the milk.\n")))
              ;; The view was told each step, in order.
              (let ((told (cl-remove-if (lambda (e) (memq e '(reply-text wait-over output output-to draft insert)))
                                        (reverse events))))
                (should (equal told '(user-message reply-start reply-end results-start results-end
                                                   reply-start reply-end turn-end))))))
        (delete-file script)))))

;;; Against a local server speaking each provider's wire format

(defun forj-loop-test--turn (root provider text &optional seconds record)
  "Send TEXT to PROVIDER on a bare session on ROOT; return the session at the end.
The turn must end (the session idle again) within SECONDS (default 30).
The session starts with RECORD, if given: the chat so far."
  (let ((process-environment (cons "FORJ_TEST_PROVIDER_KEY=sk-test-SECRET-123" process-environment)))
    (with-temp-buffer
      (let ((output (point-marker)))
        (setq forj-session
              (forj-session-create
               :root root :root-confirmed t :provider provider :record (copy-sequence record)
               :view-function (lambda (event &rest _)
                                (pcase event
                                  ('output output)
                                  ('output-to nil)
                                  ('draft "")))))
        (forj-loop-send text)
        (should (forj-test--wait-for (lambda () (eq (forj-session-state forj-session) 'idle))
                                     (or seconds 30)))
        forj-session))))

(defun forj-loop-test--requests (scenario)
  "The bodies of the requests the fake server logged for SCENARIO, parsed, in order."
  (with-temp-buffer
    (insert-file-contents forj-provider-test--log)
    (let ((found nil))
      (dolist (line (split-string (buffer-string) "\n" t))
        (let ((request (json-parse-string line :object-type 'plist)))
          ;; A question about the window is not a request for a reply.
          (when (and (string-prefix-p (concat "/" scenario "/") (plist-get request :path))
                     (plist-get request :body)
                     (not (string-match-p (regexp-quote forj-window-user-agent) line)))
            (push (forj-provider-json (plist-get request :body)) found))))
      (nreverse found))))

(defun forj-loop-test--provider (family scenario &rest more)
  "A provider of FAMILY on the fake server's SCENARIO, with native tools, plus MORE."
  (append (list :name (format "fake-%s" family) :family family :model "fake-model" :native-tools t
                :url (format "http://127.0.0.1:%d/%s/v1" (forj-provider-test--server) scenario)
                :key-env '("FORJ_TEST_PROVIDER_KEY"))
          more))

(defun forj-loop-test--calls (session)
  "The tool calls in SESSION's record, as the record keeps them."
  (with-temp-buffer
    (insert (forj-session-transcript (forj-session-record session)))
    (delq nil (mapcar (lambda (e) (plist-get e :call)) (forj-tools-parse-region (point-min) (point-max))))))

(defun forj-loop-test--notices (session)
  "The notices of SESSION's record, joined."
  (mapconcat (lambda (e) (plist-get e :text))
             (cl-remove-if-not (lambda (e) (equal (plist-get e :role) "notice"))
                               (forj-session-record session))
             ""))

(defconst forj-loop-test--files '(("a.txt" . "alpha\n") ("b.txt" . "beta\n"))
  "The project the provider loops read from.")

(ert-deftest forj-test-loop-call-ids-unique-when-the-server-sends-none ()
  "A server that sends no ids, or the same ids in every reply, gets unique ones across replies.
Each call and its result keep the same id."
  (forj-test-with-project forj-loop-test--files
   (dolist (case '("noidloop" "dupidloop"))
    (let* ((scenario (format "openai-%s.%d" case (random 1000000)))
           (session (forj-loop-test--turn root (forj-loop-test--provider 'openai scenario :local t)
                                          "Read a.txt and b.txt"))
           (ids (mapcar (lambda (c) (plist-get c :id)) (forj-loop-test--calls session)))
           (requests (forj-loop-test--requests scenario)))
      (should (= (length ids) 2))
      (should-not (equal (nth 0 ids) (nth 1 ids)))
      (should (= (length requests) 3))
      ;; The last request: each call's id is its result's id.
      (let* ((messages (append (plist-get (nth 2 requests) :messages) nil))
             (calls (cl-loop for m in messages
                             append (mapcar (lambda (c) (plist-get c :id))
                                            (append (plist-get m :tool_calls) nil))))
             (results (cl-loop for m in messages
                               when (equal (plist-get m :role) "tool")
                               collect (plist-get m :tool_call_id))))
        (should (equal calls ids))
        (should (equal results ids)))
      (should (string-match-p "Both read\\." (forj-session-transcript (forj-session-record session))))))))

(ert-deftest forj-test-loop-switching-to-anthropic-maps-foreign-call-ids ()
  "A chat whose calls have ids Anthropic refuses goes on with Anthropic: ids mapped, call and result alike."
  (forj-test-with-project forj-loop-test--files
    (let* ((first (forj-loop-test--turn root (forj-loop-test--provider
                                              'openai (format "openai-dupidloop.%d" (random 1000000)) :local t)
                                        "Read a.txt and b.txt"))
           (scenario (format "anthropic-text.%d" (random 1000000)))
           (second (forj-loop-test--turn root (forj-loop-test--provider 'anthropic scenario) "Thanks"
                                         30 (forj-session-record first)))
           (messages (append (plist-get (car (forj-loop-test--requests scenario)) :messages) nil))
           (blocks (cl-loop for m in messages append (append (plist-get m :content) nil)))
           (uses (cl-loop for b in blocks when (equal (plist-get b :type) "tool_use") collect (plist-get b :id)))
           (results (cl-loop for b in blocks when (equal (plist-get b :type) "tool_result")
                             collect (plist-get b :tool_use_id))))
      (should (member "functions.read_file:0" (mapcar (lambda (c) (plist-get c :id))
                                                      (forj-loop-test--calls first))))
      (should (= (length uses) 2))
      (should (cl-every (lambda (id) (string-match-p "\\`[A-Za-z0-9_-]+\\'" id)) uses))
      (should-not (equal (nth 0 uses) (nth 1 uses)))
      (should (equal uses results))
      (should (string-match-p "Hello, world" (forj-session-transcript (forj-session-record second)))))))

(ert-deftest forj-test-loop-gemini-thought-signatures-go-back-with-their-calls ()
  "Each functionCall goes back in the next requests with its own thoughtSignature, unchanged."
  (forj-test-with-project forj-loop-test--files
    (let* ((scenario (format "gemini-sigloop.%d" (random 1000000)))
           (session (forj-loop-test--turn root (forj-loop-test--provider 'gemini scenario)
                                          "Read a.txt and b.txt"))
           (requests (forj-loop-test--requests scenario))
           (signed (lambda (request)
                     (cl-loop for content across (plist-get request :contents)
                              append (cl-loop for part across (plist-get content :parts)
                                              when (plist-get part :functionCall)
                                              collect (list (plist-get (plist-get (plist-get part :functionCall) :args)
                                                                       :path)
                                                            (plist-get part :thoughtSignature)))))))
      (should (= (length requests) 3))
      (should (equal (funcall signed (nth 1 requests)) '(("a.txt" "SIG-A"))))
      (should (equal (funcall signed (nth 2 requests)) '(("a.txt" "SIG-A") ("b.txt" "SIG-B"))))
      (let ((ids (mapcar (lambda (c) (plist-get c :id)) (forj-loop-test--calls session))))
        (should (= (length (delete-dups (copy-sequence ids))) 2)))
      (should (string-match-p "alpha" (forj-session-transcript (forj-session-record session)))))))

(ert-deftest forj-test-loop-anthropic-thinking-goes-back-before-its-tool-use ()
  "The thinking and redacted_thinking blocks go back first in the assistant message, unchanged."
  (forj-test-with-project forj-loop-test--files
    (let* ((scenario (format "anthropic-thinkloop.%d" (random 1000000)))
           (session (forj-loop-test--turn root (forj-loop-test--provider 'anthropic scenario :thinking 2048)
                                          "Read a.txt"))
           (requests (forj-loop-test--requests scenario))
           (second (nth 1 requests))
           (assistant (cl-find "assistant" (plist-get second :messages)
                               :key (lambda (m) (plist-get m :role)) :test #'equal))
           (content (append (plist-get assistant :content) nil))
           (result (cl-find-if (lambda (b) (equal (plist-get b :type) "tool_result"))
                               (plist-get (aref (plist-get second :messages) 2) :content))))
      (should (= (length requests) 2))
      (should (equal (plist-get second :thinking) '(:type "enabled" :budget_tokens 2048)))
      (should (equal (mapcar (lambda (b) (plist-get b :type)) content)
                     '("thinking" "redacted_thinking" "tool_use")))
      (should (equal (nth 0 content)
                     '(:type "thinking" :thinking "The user wants a.txt; I will read it."
                             :signature "EqQBCkYIARgCKkBSIG-thinking-signature==")))
      (should (equal (plist-get (nth 1 content) :data)
                     "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"))
      (should (equal (plist-get (nth 2 content) :id) (plist-get result :tool_use_id)))
      (should (string-match-p "Done\\." (forj-session-transcript (forj-session-record session)))))))

(ert-deftest forj-test-loop-anthropic-pause-turn-continues-the-turn ()
  "pause_turn asks again and the turn goes on; a provider that keeps pausing is stopped, and the user told."
  (forj-test-with-project forj-loop-test--files
    (let* ((scenario (format "anthropic-pauseloop.%d" (random 1000000)))
           (session (forj-loop-test--turn root (forj-loop-test--provider 'anthropic scenario) "Search"))
           (requests (forj-loop-test--requests scenario))
           (last (aref (plist-get (nth 1 requests) :messages)
                       (1- (length (plist-get (nth 1 requests) :messages))))))
      (should (= (length requests) 2))
      ;; The paused reply goes back as the last message, for the model to go on from.
      (should (equal (plist-get last :role) "assistant"))
      (should (string-match-p "paused its turn (stop_reason \"pause_turn\"" (forj-loop-test--notices session)))
      (should (string-match-p "Found it\\." (forj-session-transcript (forj-session-record session))))
      (should (eq (forj-session-state session) 'idle)))
    (let* ((scenario (format "anthropic-pausealways.%d" (random 1000000)))
           (session (forj-loop-test--turn root (forj-loop-test--provider 'anthropic scenario) "Search")))
      (should (= (length (forj-loop-test--requests scenario)) (1+ forj-loop-max-pauses)))
      (should (string-match-p "forj stopped asking it to go on" (forj-loop-test--notices session)))
      (should (eq (plist-get (forj-session-continuation session) :kind) 'paused)))))

(ert-deftest forj-test-loop-silent-server-ends-the-turn-with-an-error ()
  "A server that never answers, or stalls, ends the turn with a visible error; the user has the prompt."
  (forj-test-with-project forj-loop-test--files
    (let* ((forj-provider-idle-timeout 1)
           (session (forj-loop-test--turn root (forj-loop-test--provider 'openai "openai-hang") "Hi" 15)))
      (should (eq (forj-session-state session) 'idle))
      (should (string-match-p "did not answer.*forj-provider-first-byte-timeout"
                              (forj-loop-test--notices session))))
    (let* ((forj-provider-idle-timeout 1)
           (session (forj-loop-test--turn root (forj-loop-test--provider 'gemini "gemini-stall") "Hi" 15)))
      (should (eq (forj-session-state session) 'idle))
      (should (string-match-p "## Assistant\n\nHello" (forj-session-transcript (forj-session-record session))))
      (should (string-match-p "stopped sending in the middle of the reply.*the text so far is kept"
                              (forj-loop-test--notices session))))))

(ert-deftest forj-test-loop-server-error-in-stream-and-key-echo-are-shown-safely ()
  "llama.cpp's context error is shown as such; a 401 echoing the key names its source, not the key."
  (forj-test-with-project forj-loop-test--files
    (let ((session (forj-loop-test--turn root (forj-loop-test--provider 'openai "openai-streamerror" :local t)
                                         "Hi")))
      (should (string-match-p "exceed context window of 8192" (forj-loop-test--notices session)))
      (should-not (string-match-p "empty" (forj-loop-test--notices session))))
    (let* ((forj-provider-retries 0)
           (session (forj-loop-test--turn root (forj-loop-test--provider 'anthropic "anthropic-echokey") "Hi"))
           (transcript (forj-session-transcript (forj-session-record session))))
      (should-not (string-match-p "SECRET" transcript))
      (should (string-match-p "HTTP 401.*the key came from the environment variable FORJ_TEST_PROVIDER_KEY"
                              transcript)))))

(ert-deftest forj-test-loop-prompt-fits-core-set-then-a-loaded-family ()
  "The first request offers the core set; load_tools adds a family to the next.
For each provider family, against a local server: the first request
carries the core tools and load_tools, no git tool; after the model
loads the git family, the next request offers git_status, whose call
runs and whose result the model then reads."
  (dolist (family '(openai anthropic gemini))
    (forj-test-with-project '(("notes.txt" . "remember the milk\n"))
      (call-process "git" nil nil nil "-C" root "init" "-q")
      (let* ((scenario (format "%s-loadtools.%s" family (random 100000)))
             (provider (append (forj-provider-test--provider family "loadtools")
                               (list :native-tools t)))
             (process-environment (cons "FORJ_TEST_PROVIDER_KEY=sk-test" process-environment)))
        (setq provider (plist-put provider :url
                                  (format "http://127.0.0.1:%d/%s/v1"
                                          (forj-provider-test--server) scenario)))
        (forj-loop-test-with-session provider
          (forj-loop-send "What is the state of the repository?")
          (should (forj-test--wait-for (lambda () (eq (forj-session-state forj-session) 'idle)) 30))
          (let* ((bodies (forj-loop-test--bodies scenario))
                 (first (forj-loop-test--offered family (nth 0 bodies)))
                 (second (forj-loop-test--offered family (nth 1 bodies))))
            (should (= (length bodies) 3))
            (should (member "load_tools" first))
            (should (member "read_file" first))
            (should (member "run_tests" first))
            (should-not (member "git_status" first))
            (should-not (member "curl" first))
            (should (member "git_status" second))
            (should (member "git_push" second))
            (should-not (member "curl" second))
            (should (equal (forj-session-families forj-session) '("git"))))
          (let ((record (forj-session-record forj-session)))
            (should (equal (mapcar (lambda (e) (plist-get e :role)) record)
                           '("user" "assistant" "tool" "assistant" "tool" "assistant")))
            (should (string-match-p "\"name\":\"git_status\",\"ok\":true"
                                    (plist-get (nth 4 record) :text)))))))))

(ert-deftest forj-test-loop-prompt-fits-a-call-to-a-tool-not-loaded-loads-its-family ()
  "A call to a tool the chat did not offer runs, and its family is offered next."
  (forj-test-with-project '(("notes.txt" . "remember the milk\n"))
    (call-process "git" nil nil nil "-C" root "init" "-q")
    (let* ((script (forj-chat-test--script
                    (list (list :text (forj-chat-test--block
                                       "{\"id\": \"s1\", \"name\": \"git_status\", \"args\": {}}"))
                          (list :text "Clean."))))
           (forj-provider-scripted-delay 0.001))
      (unwind-protect
          (forj-loop-test-with-session (list :name "test-script" :family 'scripted :script script)
            (forj-loop-send "Status?")
            (should (forj-test--wait-for (lambda () (eq (forj-session-state forj-session) 'idle)) 30))
            (should (string-match-p "\"name\":\"git_status\",\"ok\":true"
                                    (plist-get (nth 2 (forj-session-record forj-session)) :text)))
            (should (equal (forj-session-families forj-session) '("git")))
            (should (member "git_status" (mapcar (lambda (tool) (plist-get tool :name))
                                                 (append (forj-session-tools forj-session) nil))))
            ;; The fenced-block prompt lists the tools it offers.
            (should (string-match-p "### git_status" (forj-session-system-prompt))))
        (delete-file script)))))

(ert-deftest forj-test-loop-prompt-fits-an-8k-window-with-the-core-set ()
  "At an 8k window the first request goes with the core set, not with every tool.
A request that cannot fit is not sent; the notice says what it holds
and what to drop.  For each provider family, against a local server."
  (dolist (family '(openai anthropic gemini))
    (forj-test-with-project '(("notes.txt" . "remember the milk\n"))
      (let* ((process-environment (cons "FORJ_TEST_PROVIDER_KEY=sk-test" process-environment))
             (notices nil))
        (dolist (tool-set '(all core))
          (let* ((forj-chat-tool-set tool-set)
                 (scenario (format "%s-text.fit%s" family (random 100000)))
                 (provider (append (forj-provider-test--provider family "text")
                                   (list :native-tools t :context-window 8192))))
            (setq provider (plist-put provider :url (format "http://127.0.0.1:%d/%s/v1"
                                                            (forj-provider-test--server) scenario)))
            (forj-loop-test-with-session provider
              (cl-letf (((symbol-function 'forj-session-notice)
                         (lambda (text) (push text notices))))
                (forj-loop-send "Hi")
                (should (forj-test--wait-for (lambda () (eq (forj-session-state forj-session) 'idle)) 30))
                (let ((bodies (forj-loop-test--bodies scenario)))
                  (if (eq tool-set 'all)
                      (progn
                        (should (null bodies))
                        (should (string-match-p
                                 "not sent: this request holds about [0-9.]+k tokens, more than the 8.2k-token context window of fake-model (tool definitions [0-9.]+k, "
                                 (car notices)))
                        (should (string-match-p "set forj-chat-tool-set to core" (car notices))))
                    (should (= (length bodies) 1))
                    (should (member "load_tools" (forj-loop-test--offered family (car bodies))))
                    (should (string-match-p "Hello, world"
                                            (plist-get (car (last (forj-session-record forj-session)))
                                                       :text)))))))))))))

(ert-deftest forj-test-loop-context-window-asked-of-the-server ()
  "The window of a local model is what its server says: llama.cpp's /props, Ollama's /api/show.
It sizes the header's share and the results' budget; a cloud model's
window comes from the table, and a provider's :context-window wins."
  (forj-test-with-project '(("notes.txt" . "remember the milk\n"))
    (let ((process-environment (cons "FORJ_TEST_PROVIDER_KEY=sk-test" process-environment)))
      (dolist (case '(("llamacpp" 8192) ("ollamashow" 6144) ("text" nil)))
        (clrhash forj-usage-learned-windows)
        (let* ((scenario (format "openai-%s.win%s" (car case) (random 100000)))
               (provider (forj-provider-test--provider 'openai (car case))))
          (setq provider (plist-put provider :url (format "http://127.0.0.1:%d/%s/v1"
                                                          (forj-provider-test--server) scenario)))
          (forj-loop-test-with-session provider
            (forj-loop-send "Hi")
            (should (forj-test--wait-for (lambda () (eq (forj-session-state forj-session) 'idle)) 30))
            (should (= (forj-usage-context-window provider)
                       (or (cadr case) forj-usage-default-context-window)))
            (when (cadr case)
              (should (<= (forj-loop-result-budget) (* 4 (cadr case)))))
            ;; Asked once per server and model.
            (should (gethash (forj-usage-window-key provider) forj-usage-learned-windows))
            (should (equal (plist-get (car (last (forj-session-record forj-session))) :text)
                           "## Assistant\n\nHello, world\n"))))))
    (should (= (forj-usage-context-window (list :family 'anthropic :model "claude-sonnet-4-5")) 200000))
    (should (= (forj-usage-context-window (list :family 'openai :model "m" :context-window 9000)) 9000))))

(ert-deftest forj-test-loop-compaction-mid-turn-keeps-the-question-and-the-latest-batch ()
  "After a compaction between batches the model reads the summary, the turn's question,
and the latest batch's call paired with its result, for each provider family."
  (dolist (family '(openai anthropic gemini))
    (forj-test-with-project '(("notes.txt" . "remember the milk\n"))
      (let* ((process-environment (cons "FORJ_TEST_PROVIDER_KEY=sk-test" process-environment))
             (forj-compact-threshold 0.8)
             (scenario (format "%s-compactnative.%s" family (random 100000)))
             (provider (append (forj-provider-test--provider family "compactnative")
                               (list :native-tools t :context-window 8000))))
        (setq provider (plist-put provider :url (format "http://127.0.0.1:%d/%s/v1"
                                                        (forj-provider-test--server) scenario)))
        (forj-loop-test-with-session provider
          (forj-loop-send "What does notes.txt say?")
          (should (forj-test--wait-for (lambda () (eq (forj-session-state forj-session) 'idle)) 30))
          (let* ((bodies (forj-loop-test--bodies scenario))
                 (resumed (json-serialize (nth 2 bodies)))
                 ;; Each after the one before (the system prompt names read_file too).
                 (at (let ((from 0))
                       (lambda (regexp) (setq from (string-match regexp resumed from))))))
            ;; The question, the summary asked for after the read, the resumed request.
            (should (= (length bodies) 3))
            (should (string-match-p "Write a summary that replaces" (json-serialize (nth 1 bodies))))
            (should (funcall at "SUMMARY-OF-EARLIER"))
            (should (funcall at "What does notes.txt say"))
            (should (funcall at "read_file"))
            (should (funcall at "remember the milk"))
            (pcase family
              ('openai
               (let ((messages (append (plist-get (nth 2 bodies) :messages) nil)))
                 (should (equal (mapcar (lambda (m) (plist-get m :role)) messages)
                                '("system" "user" "assistant" "tool")))
                 (should (equal (plist-get (aref (plist-get (nth 2 messages) :tool_calls) 0) :id)
                                (plist-get (nth 3 messages) :tool_call_id)))))
              ('anthropic
               (let ((messages (append (plist-get (nth 2 bodies) :messages) nil)))
                 (should (equal (mapcar (lambda (m) (plist-get m :role)) messages)
                                '("user" "assistant" "user")))
                 (should (equal (plist-get (aref (plist-get (nth 1 messages) :content) 0) :id)
                                (plist-get (aref (plist-get (nth 2 messages) :content) 0) :tool_use_id)))))
              ('gemini
               (let ((contents (append (plist-get (nth 2 bodies) :contents) nil)))
                 (should (= (length contents) 3))
                 (should (plist-get (aref (plist-get (nth 1 contents) :parts) 0) :functionCall))
                 (should (plist-get (aref (plist-get (nth 2 contents) :parts) 0) :functionResponse))))))
          (should (equal (plist-get (car (last (forj-session-record forj-session))) :text)
                         "## Assistant\n\nAnswered.\n")))))))

(provide 'forj-loop-test)
;;; forj-loop-test.el ends here
