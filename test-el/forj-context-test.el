;;; forj-context-test.el --- Context added by the user, sent and counted  -*- lexical-binding: t; -*-

;;; Commentary:

;; Files, buffers and regions added to a chat's context through the real
;; worker (which keeps them in the project and refuses denied files), the
;; list drawn at the top of the chat, what reaches the provider (the
;; local server of fake_provider.py, in each family's wire format), the
;; count in the header line, `forj-send-region' and @path completion.

;;; Code:

(require 'ert)
(require 'forj-chat)
(require 'forj-epc-test)
(require 'forj-provider-test)
(require 'forj-usage-test)
(require 'dired)

(defun forj-context-test--wait-items (n)
  "Wait until this chat's context holds N items."
  (let ((buffer (current-buffer)))
    (forj-test--wait-for (lambda () (= n (length (buffer-local-value 'forj-context-items buffer)))) 30)))

(ert-deftest forj-test-context-file-sent-as-anthropic-document ()
  "An added file is listed at the top, counted, and sent as a document block."
  (forj-usage-test-with-chat (forj-provider-test--provider 'anthropic "text")
    (let ((before (car (forj-compact-estimate))))
      (forj-add-context (expand-file-name "notes.txt" root))
      (should (forj-context-test--wait-items 1))
      ;; Listed at the top, after the chat's first line, with its size.
      (goto-char (point-min))
      (forward-line 1)
      (should (looking-at "Context, sent with every request: 1 item, 18 bytes, ≈6 tokens\n  \\[remove\\] notes.txt  18 bytes"))
      ;; Counted in the estimate of the next request.
      (should (> (car (forj-compact-estimate)) before)))
    (forj-usage-test--say "What does it say?")
    (let* ((body (forj-provider-json (plist-get (forj-provider-test--last-request) :body)))
           (first (aref (plist-get body :messages) 0))
           (document (aref (plist-get first :content) 0)))
      (should (equal (plist-get first :role) "user"))
      (should (equal (plist-get document :type) "document"))
      (should (equal (plist-get document :title) "notes.txt"))
      (should (equal (plist-get document :source)
                     '(:type "text" :media_type "text/plain" :data "remember the milk\n")))
      ;; The user's message follows in the same user turn.
      (should (cl-some (lambda (block) (equal (plist-get block :text) "What does it say?"))
                       (plist-get first :content))))
    ;; The list stays at the top after the view is drawn again.
    (goto-char (point-min))
    (forward-line 1)
    (should (looking-at "Context, sent with every request"))
    ;; [remove] takes it away, from the list and from the next request.
    (search-forward "[remove]")
    (push-button (match-beginning 0))
    (should-not forj-context-items)
    (should-not (string-match-p "Context, sent with every request" (buffer-string)))
    (forj-usage-test--say "And now?")
    (should-not (string-match-p "\"document\""
                                (plist-get (forj-provider-test--last-request) :body)))))

(ert-deftest forj-test-context-openai-and-gemini-text-parts ()
  "Without document blocks, context goes as text that names its source."
  (dolist (family '(openai gemini))
    (forj-usage-test-with-chat (forj-provider-test--provider family "text")
      (forj-add-context (expand-file-name "notes.txt" root))
      (should (forj-context-test--wait-items 1))
      (forj-usage-test--say "What does it say?")
      (let ((body (plist-get (forj-provider-test--last-request) :body)))
        (should (string-match-p (regexp-quote "<context source=\\\"notes.txt\\\">\\nremember the milk\\n\\n</context>")
                                body))))))

(ert-deftest forj-test-context-denied-and-outside-files-refused ()
  "The worker's denied patterns refuse .env, as file and as buffer; files outside are refused."
  (forj-usage-test-with-chat (forj-provider-test--provider 'anthropic "text")
    (let ((outside (make-temp-file "forj-outside-")))
      (unwind-protect
          (should-error (forj-add-context outside) :type 'user-error)
        (delete-file outside)))
    (let ((done nil) (item 'unset))
      (forj-context-add-file (expand-file-name ".env" root) (current-buffer)
                             (lambda (i) (setq item i done t)))
      (should (forj-test--wait-for (lambda () done) 30))
      (should-not item))
    (let ((env (find-file-noselect (expand-file-name ".env" root)))
          (chat (current-buffer)))
      (unwind-protect
          (progn
            (with-current-buffer env (forj-add-context env))
            ;; The worker's answer comes asynchronously; nothing is added.
            (forj-test--wait-for (lambda () nil) 1)
            (should-not (buffer-local-value 'forj-context-items chat)))
        (kill-buffer env)))
    (should-not forj-context-items)))

(defun forj-context-test--edit (conn session)
  "Plan and run on CONN, in SESSION, an edit of notes.txt; t, or the error message."
  (let* ((plan (forj-epc-call-sync
                conn "plan"
                (list :calls (vector (list :id "e" :name "edit"
                                           :args (list :path "notes.txt" :old_string "milk"
                                                       :new_string "bread")))
                      :session session)
                :timeout 30))
         (reply (forj-epc-call-sync conn "execute"
                                    (list :batch_id (plist-get plan :batch_id) :approved ["e"])
                                    :timeout 30))
         (result (aref (plist-get reply :results) 0)))
    (or (eq (plist-get result :ok) t)
        (plist-get (plist-get result :error) :message))))

(ert-deftest forj-test-context-an-added-file-is-read-for-its-chat-only ()
  "A file added to a chat's context is read for that chat's edits, not another chat's."
  (forj-usage-test-with-chat (forj-provider-test--provider 'anthropic "text")
    (let ((done nil))
      (forj-context-add-file (expand-file-name "notes.txt" root) (current-buffer)
                             (lambda (_) (setq done t)))
      (should (forj-test--wait-for (lambda () done) 30)))
    (let ((conn (forj-worker-connection (forj-worker-get root))))
      (should (equal (forj-context-test--edit conn "chat-elsewhere")
                     "notes.txt was not read in this session; read it before changing it"))
      (should (eq (forj-context-test--edit conn (forj-tools-session-id)) t))
      (should (equal (with-temp-buffer
                       (insert-file-contents (expand-file-name "notes.txt" root))
                       (buffer-string))
                     "remember the bread\n")))))

(ert-deftest forj-test-context-buffer-and-region ()
  "A buffer and a region of a project file are added under their names."
  (forj-usage-test-with-chat (forj-provider-test--provider 'anthropic "text")
    (let ((notes (find-file-noselect (expand-file-name "notes.txt" root)))
          (scratch (get-buffer-create "*forj-context-test*")))
      (unwind-protect
          (progn
            (with-current-buffer scratch (erase-buffer) (insert "line one\nline two\nline three\n"))
            (forj-add-context scratch)
            (should (forj-context-test--wait-items 1))
            (with-current-buffer notes
              (forj-context-add-buffer notes (point-min) (point-max)))
            (should (forj-context-test--wait-items 2))
            (should (equal (mapcar (lambda (i) (plist-get i :title)) forj-context-items)
                           '("*forj-context-test*" "notes.txt:1-1")))
            (should (equal (plist-get (cadr forj-context-items) :text) "remember the milk\n")))
        (kill-buffer notes)
        (kill-buffer scratch)))))

(ert-deftest forj-test-context-dired-marked-files ()
  "In Dired, the marked files go to the chat of their project; a denied one is refused."
  (forj-usage-test-with-chat (forj-provider-test--provider 'anthropic "text")
    (with-temp-file (expand-file-name "todo.txt" root) (insert "buy bread\n"))
    (let ((dired (dired-noselect root)))
      (unwind-protect
          (with-current-buffer dired
            (dolist (name '("notes.txt" "todo.txt" ".env"))
              (dired-goto-file (expand-file-name name root))
              (dired-mark 1))
            (call-interactively #'forj-add-context))
        (kill-buffer dired)))
    (should (forj-context-test--wait-items 2))
    (forj-test--wait-for (lambda () nil) 1)
    (should (equal (sort (mapcar (lambda (i) (plist-get i :title)) forj-context-items) #'string<)
                   '("notes.txt" "todo.txt")))))

(ert-deftest forj-test-context-send-region ()
  "`forj-send-region' asks about a region of a file in the project's chat."
  (forj-usage-test-with-chat (forj-provider-test--provider 'anthropic "text")
    (let ((chat (current-buffer))
          (notes (find-file-noselect (expand-file-name "notes.txt" root))))
      (unwind-protect
          (with-current-buffer notes
            (forj-send-region (point-min) (point-max) "Is this a reminder?")
            (should (forj-test--wait-for
                     (lambda () (string-match-p "Hello, world" (with-current-buffer chat (buffer-string))))
                     30)))
        (kill-buffer notes))
      (let* ((body (forj-provider-json (plist-get (forj-provider-test--last-request) :body)))
             (message (aref (plist-get body :messages) 0)))
        (should (equal (plist-get (aref (plist-get message :content) 0) :text)
                       "Is this a reminder?\n\nnotes.txt:1-1:\n\n```text\nremember the milk\n```"))))))

(ert-deftest forj-test-context-at-path-completion ()
  "@ in the input completes project files; choosing one adds it."
  (forj-usage-test-with-chat (forj-provider-test--provider 'anthropic "text")
    ;; project.el lists a Git project's files with git itself.
    (should (eq 0 (call-process "git" nil nil nil "-C" root "init" "-q")))
    (goto-char (point-max))
    (insert "Look at @no")
    (let* ((capf (forj-context-complete-at-point))
           (table (nth 2 capf)))
      (should capf)
      (should (equal (buffer-substring (nth 0 capf) (nth 1 capf)) "no"))
      (should (member "notes.txt" (all-completions "no" table)))
      (funcall (plist-get (nthcdr 3 capf) :exit-function) "notes.txt" 'finished))
    (should (forj-context-test--wait-items 1))
    (should (equal (plist-get (car forj-context-items) :title) "notes.txt"))))

(provide 'forj-context-test)
;;; forj-context-test.el ends here
