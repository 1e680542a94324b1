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
