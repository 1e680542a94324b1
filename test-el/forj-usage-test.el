;;; forj-usage-test.el --- Tokens, cost, prompt caching, compaction: through real curl  -*- lexical-binding: t; -*-

;;; Commentary:

;; A chat talks to the local server of fake_provider.py, which answers in
;; each provider's streaming wire format with its usage fields; the
;; header line must show what each reported.  The Anthropic request must
;; carry its cache breakpoints, the OpenAI request must ask for usage,
;; and a conversation over the threshold of a small window must be
;; compacted before the next request, with the compacted request sent.

;;; Code:

(require 'ert)
(require 'forj-chat)
(require 'forj-epc-test)
(require 'forj-provider-test)

(defmacro forj-usage-test-with-chat (provider &rest body)
  "Run BODY in a chat on a small project whose model is PROVIDER (a plist).
`root' is the project, `chat' the chat buffer."
  (declare (indent 1) (debug t))
  `(forj-test-with-project '(("notes.txt" . "remember the milk\n")
                             (".env" . "API_KEY=sk-live-1234567890abcdef\n"))
     (make-directory (expand-file-name ".git" root))
     (let* ((spec ,provider)
            (forj-providers (cons (cons (plist-get spec :name) (cl-loop for (k v) on spec by #'cddr
                                                                         unless (eq k :name)
                                                                         append (list k v)))
                                  forj-providers))
            (forj-provider (plist-get spec :name))
            (process-environment (cons "FORJ_TEST_PROVIDER_KEY=sk-test-SECRET-123" process-environment))
            (chat (forj root)))
       (unwind-protect
           (with-current-buffer chat ,@body)
         (when (buffer-live-p chat)
           (with-current-buffer chat (set-buffer-modified-p nil))
           (kill-buffer chat))))))

(defun forj-usage-test--say (text)
  "Type TEXT at the prompt, send it and wait for the end of the turn."
  (goto-char (point-max))
  (insert text)
  (forj-chat-send)
  (let ((buffer (current-buffer)))
    (should (forj-test--wait-for (lambda () (eq (forj-session-state (buffer-local-value 'forj-session buffer)) 'idle))
                                 30))))

(defun forj-usage-test--requests ()
  "Every request the fake server logged, oldest first, as plists."
  (with-temp-buffer
    (insert-file-contents forj-provider-test--log)
    (mapcar (lambda (line) (json-parse-string line :object-type 'plist))
            (split-string (buffer-string) "\n" t))))

(ert-deftest forj-test-usage-of-each-provider-in-the-header-line ()
  "Usage fields of OpenAI, Anthropic and Gemini streams reach the header line, priced."
  (dolist (case '((openai "gpt-4.1" "last: in 1.2k out 50 cached 1.0k $0.0013")
                  (anthropic "claude-sonnet-4-5" "last: in 4.5k out 42 cached 3.0k $0.0072")
                  (gemini "gemini-2.5-flash" "last: in 1.2k out 48 cached 1.0k $0.0003")))
    (pcase-let ((`(,family ,model ,expected) case))
      (forj-usage-test-with-chat (plist-put (forj-provider-test--provider family "usage") :model model)
        (should (string-match-p "context ≈[0-9]+% of" (forj-chat--header-line)))
        (forj-usage-test--say "Hi")
        (should (string-match-p "Hello" (buffer-string)))
        (let ((header (forj-chat--header-line)))
          (should (string-match-p (regexp-quote expected) header))
          ;; One reply: the session is that reply (Gemini repeats its usage
          ;; in every event; it counts once).
          (should (string-match-p (regexp-quote (concat "session: " (substring expected 6))) header))
          ;; Measured, not estimated, once the provider counted.
          (should (string-match-p "context [0-9]+% of" header)))
        (when (eq family 'openai)
          (should (string-match-p "\"stream_options\":{\"include_usage\":true}"
                                  (plist-get (forj-provider-test--last-request) :body)))
          (forj-usage-test--say "Again")
          (should (string-match-p "session: in 2.4k out 100 cached 2.0k \\$0.0025"
                                  (forj-chat--header-line))))))))

(ert-deftest forj-test-usage-unknown-model-shows-tokens-without-cost ()
  "A model with no price shows its tokens and $? instead of a made-up cost."
  (forj-usage-test-with-chat (forj-provider-test--provider 'openai "usage")
    (forj-usage-test--say "Hi")
    (should (string-match-p "last: in 1.2k out 50 cached 1.0k \\$\\?" (forj-chat--header-line)))
    (should (string-match-p "session: in 1.2k out 50 cached 1.0k \\$\\?" (forj-chat--header-line)))))

(ert-deftest forj-test-usage-anthropic-cache-breakpoints ()
  "The Anthropic request caches the system prompt, the tools and the conversation."
  (let* ((run (forj-provider-test--run
               (forj-provider-test--provider 'anthropic "text" :native-tools t)
               forj-provider-test--tools))
         (body (forj-provider-json (plist-get (forj-provider-test--last-request) :body)))
         (system (plist-get body :system))
         (tools (plist-get body :tools))
         (messages (plist-get body :messages))
         (last-block (let ((content (plist-get (aref messages (1- (length messages))) :content)))
                       (aref content (1- (length content))))))
    (should (plist-get run :done))
    (should (equal (plist-get (aref system 0) :text) "You are a test."))
    (should (equal (plist-get (aref system 0) :cache_control) '(:type "ephemeral")))
    (should (equal (plist-get (aref tools (1- (length tools))) :cache_control) '(:type "ephemeral")))
    (should (equal (plist-get last-block :text) "Hi"))
    (should (equal (plist-get last-block :cache_control) '(:type "ephemeral")))))

(ert-deftest forj-test-usage-compaction-at-the-threshold ()
  "Over 80% of the window, the next request is compacted first; the record keeps everything."
  (let ((forj-compact-threshold 0.8))
    (forj-usage-test-with-chat (forj-provider-test--provider 'openai "compact" :context-window 8000)
      (forj-usage-test--say "First question about notes.txt")
      (let ((before (length (forj-usage-test--requests))))
        ;; The reply counted 7340 + 20 tokens of an 8000-token window.
        (should (string-match-p "context 92% of 8.0k" (forj-chat--header-line)))
        (forj-usage-test--say "Second question")
        (let* ((requests (nthcdr before (forj-usage-test--requests)))
               (summary-request (plist-get (nth 0 requests) :body))
               (next-request (plist-get (nth 1 requests) :body)))
          (should (= (length requests) 2))
          ;; The model was asked for a summary of what came before.
          (should (string-match-p "Write a summary that replaces" summary-request))
          (should (string-match-p "First question about notes.txt" summary-request))
          (should-not (string-match-p "Second question" summary-request))
          ;; The compacted request: the summary, then the new message, and
          ;; nothing of the earlier turn.
          (should (string-match-p "SUMMARY-OF-EARLIER" next-request))
          (should (string-match-p "Second question" next-request))
          (should-not (string-match-p "First question about notes.txt" next-request))
          (let ((messages (plist-get (forj-provider-json next-request) :messages)))
            (should (equal (mapcar (lambda (m) (plist-get m :role)) messages)
                           '("system" "user" "user")))
            (should (string-match-p "\\`\\*\\*Summary of the earlier conversation\\*\\*"
                                    (plist-get (aref messages 1) :content)))))
        ;; The user sees the summary and what happened; the record and the
        ;; saved chat keep the whole history.
        (should (string-match-p "SUMMARY-OF-EARLIER" (buffer-string)))
        (should (string-match-p "compacted: 2 earlier messages" (buffer-string)))
        (let ((transcript (forj-session-transcript)))
          (should (string-match-p "First question about notes.txt" transcript))
          (should (< (string-match "SUMMARY-OF-EARLIER" transcript)
                     (string-match "Second question" transcript)))
          (should (string-match-p "Answered.\n\\'" transcript)))
        (let ((file (make-temp-file "forj-chat-" nil ".md")))
          (unwind-protect
              (progn
                (forj-save file)
                (with-temp-buffer
                  (insert-file-contents file)
                  (should (string-match-p "First question about notes.txt" (buffer-string)))
                  (should (string-match-p "SUMMARY-OF-EARLIER" (buffer-string)))))
            (delete-file file)))
        ;; Read back from the record, the model sees the summary first.
        (should (equal (plist-get (car (forj-loop-messages)) :text)
                       (concat "**Summary of the earlier conversation**, written by the model to replace it:\n\n"
                               "SUMMARY-OF-EARLIER: the user asked what notes.txt says; it says remember the milk.")))))))

(ert-deftest forj-test-usage-compaction-between-tool-batches ()
  "Over the threshold after a tool batch, the model is resumed from a summary."
  (let ((forj-compact-threshold 0.8))
    (forj-usage-test-with-chat (forj-provider-test--provider 'openai "compacttools" :context-window 8000)
      (let ((before (length (forj-usage-test--requests))))
        (forj-usage-test--say "What does notes.txt say?")
        (let* ((requests (mapcar (lambda (r) (plist-get r :body))
                                 (nthcdr before (forj-usage-test--requests)))))
          ;; The question, the summary asked for after the read, the resumed request.
          (should (= (length requests) 3))
          (should (string-match-p "Write a summary that replaces" (nth 1 requests)))
          (should (string-match-p "remember the milk" (nth 1 requests)))
          (should (string-match-p "SUMMARY-OF-EARLIER" (nth 2 requests)))
          ;; After the summary: the turn's question and the latest batch.
          (should (string-match-p "What does notes.txt say" (nth 2 requests)))
          (should (string-match-p "remember the milk" (nth 2 requests)))))
      ;; The summary follows the results in the record; the reply follows it.
      (let ((transcript (forj-session-transcript)))
        (should (< (string-match "## Tool results" transcript)
                   (string-match "SUMMARY-OF-EARLIER" transcript)
                   (string-match "Answered." transcript))))
      (should (equal (mapcar (lambda (m) (plist-get m :role)) (forj-loop-messages))
                     '("user" "assistant" "user" "assistant"))))))

;; The user scrolled back into the long reply while the next request
;; goes: compacting it redraws the chat, which must not move the window.
(ert-deftest forj-test-usage-auto-compaction-keeps-the-window-where-the-user-reads ()
  "Auto-compaction redraws the chat; the window still shows what the user was reading."
  (let ((forj-compact-threshold 0.8))
    (forj-usage-test-with-chat (forj-provider-test--provider 'openai "compactlong" :context-window 8000)
      (forj-usage-test--say "Tell me everything.")
      (should (string-match-p "long line 250" (buffer-string)))
      (set-window-buffer (selected-window) (current-buffer))
      (let ((before (length (forj-usage-test--requests)))
            (buffer (current-buffer)))
        (goto-char (point-max))
        (insert "And then?")
        (forj-chat-send)
        ;; While the summary is asked for, the user reads the long reply.
        (goto-char (point-min))
        (search-forward "long line 100\n")
        (let ((start (line-beginning-position))
              (at (progn (search-forward "long line 105") (point))))
          (set-window-start (selected-window) start)
          (set-window-point (selected-window) at)
          (should (forj-test--wait-for
                   (lambda () (eq (forj-session-state (buffer-local-value 'forj-session buffer)) 'idle))
                   30))
          (let ((requests (mapcar (lambda (r) (plist-get r :body))
                                  (nthcdr before (forj-usage-test--requests)))))
            ;; The summary asked for, then the resumed request.
            (should (= (length requests) 2))
            (should (string-match-p "Write a summary that replaces" (nth 0 requests)))
            (should (string-match-p "SUMMARY-OF-EARLIER" (nth 1 requests)))
            (should (string-match-p "And then" (nth 1 requests))))
          (should (string-match-p "compacted: 2 earlier messages" (buffer-string)))
          (should (string-match-p "Answered\\." (buffer-string)))
          (should (eq (window-buffer (selected-window)) buffer))
          (should (= (window-start) start))
          (should (= (window-point) at))
          (should (= (point) at)))))))

(ert-deftest forj-test-usage-compact-on-demand ()
  "`forj-compact' summarises the conversation now; below the threshold nothing is compacted."
  (let ((forj-compact-threshold 0.8))
    (forj-usage-test-with-chat (forj-provider-test--provider 'openai "compact" :context-window 100000)
      (should-error (forj-compact) :type 'user-error)
      (forj-usage-test--say "First question about notes.txt")
      (forj-usage-test--say "Second question")
      ;; 7360 of 100000 tokens: no summary was asked for.
      (should-not (string-match-p "SUMMARY-OF-EARLIER" (buffer-string)))
      (forj-compact)
      (let ((buffer (current-buffer)))
        (should (forj-test--wait-for (lambda () (eq (forj-session-state (buffer-local-value 'forj-session buffer)) 'idle))
                                     30)))
      (should (string-match-p "Write a summary that replaces"
                              (plist-get (forj-provider-test--last-request) :body)))
      (should (string-match-p "compacted: 4 earlier messages" (buffer-string)))
      (should (equal (mapcar (lambda (m) (plist-get m :role)) (forj-loop-messages)) '("user")))
      (forj-usage-test--say "Third question")
      (let ((body (plist-get (forj-provider-test--last-request) :body)))
        (should (string-match-p "SUMMARY-OF-EARLIER" body))
        (should (string-match-p "Third question" body))
        (should-not (string-match-p "Second question" body))))))

(provide 'forj-usage-test)
;;; forj-usage-test.el ends here
